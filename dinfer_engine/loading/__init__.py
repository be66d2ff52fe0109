"""Checkpoints in the Hugging Face layout: reading (and writing) weights, the tokenizer."""
