"""Model families, their configs, shared layers, the KV cache (empty: configs import torch-free)."""
