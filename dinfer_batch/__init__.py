"""dinfer_batch package."""
