"""Training and evaluation of the bundled demo model (models/demo)."""
