"""Training and evaluation of the bundled demo model (dinfer_models/demo)."""
