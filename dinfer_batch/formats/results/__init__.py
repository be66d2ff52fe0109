"""What goes out: an item's engine results to its stored row, and a stored item to OpenAI
output lines (output.py), log-probabilities in OpenAI's shapes (logprobs.py), and an
infill line's result (infill_output.py)."""
