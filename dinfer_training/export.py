"""Write trained weights as a complete LLaDA-layout checkpoint directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from dinfer_engine.loading.checkpoint import save_model
from dinfer_engine.models.config import LLaDAConfig
from dinfer_engine.models.llada import LLaDAModelLM

# recommended decoding defaults, read by the engine for any GenerationConfig field left None
GENERATION_DEFAULTS = {"gen_length": 24, "block_length": 8, "steps": 24, "decoder": "threshold",
                       "threshold": 0.9, "temperature": 0.0, "cache": "none"}


def export_demo(weights: dict[str, torch.Tensor], raw_config: dict, tokenizer_dir: Path,
                out_dir: Path, step: int) -> None:
    with torch.device("meta"):
        model = LLaDAModelLM(LLaDAConfig.from_dict(raw_config))
    model.load_state_dict(weights, assign=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_model(model, out_dir, torch.bfloat16)
    (out_dir / "config.json").write_text(json.dumps(raw_config, indent=2) + "\n")
    generation = {**GENERATION_DEFAULTS, "mask_token_id": raw_config["mask_token_id"],
                  "eos_token_id": raw_config["eos_token_id"],
                  "pad_token_id": raw_config["pad_token_id"], "trained_steps": step}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out_dir / name)
