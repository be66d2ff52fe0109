"""The checkpoints this distribution ships, as package data: `demo` (its card:
dinfer_models/demo/README.md). The service's default model folder is this one."""

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent
DEMO = MODELS_DIR / "demo"
