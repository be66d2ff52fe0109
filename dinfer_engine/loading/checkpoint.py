"""Read (and write) checkpoints in the Hugging Face LLaDA layout from a local directory:
config.json, model.safetensors or shards + model.safetensors.index.json, tokenizer files,
optional generation_config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from dinfer_engine.choices import MODEL_TYPES
from dinfer_engine.loading.cpu_memory import keep_freed_memory
from dinfer_engine.loading.tensor_reads import TensorFile
from dinfer_engine.loading.tokenizer import load_tokenizer
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.models.config import CheckpointError
from dinfer_engine.models.families import family_of
from dinfer_engine.parallel.group import Group
from dinfer_engine.parallel.layers import Shard, shard_model

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from exc


def load_config(directory: Path) -> tuple[type[DiffusionLM], Any]:
    """The checkpoint's family and its config. Mask/EOS ids missing from config.json come
    from the tokenizer (the public LLaDA-MoE and LLaDA2 configs have no mask id)."""
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{directory} has no config.json: not a model checkpoint")
    raw = read_json(config_path)
    family = family_of(raw)
    if family is None:
        raise CheckpointError(
            f"{config_path}: unknown model_type {raw.get('model_type')!r}; "
            f"supported: {', '.join(sorted(MODEL_TYPES))}"
        )
    special_ids: dict[str, int] = {}
    if raw.get("mask_token_id") is None or raw.get("eos_token_id") is None:
        tokenizer = load_tokenizer(directory)
        special_ids = {name: getattr(tokenizer, f"{name}_token_id") for name in ("mask", "eos")
                       if getattr(tokenizer, f"{name}_token_id", None) is not None}
    return family, family.read_config(raw, special_ids)


def weight_files(directory: Path) -> dict[str, Path]:
    """Map every tensor name to the safetensors file that holds it."""
    index_path = directory / INDEX_FILE
    if index_path.is_file():
        weight_map = read_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index_path}: has no weight_map")
        files = {name: directory / shard for name, shard in weight_map.items()}
        absent = sorted({str(p.name) for p in files.values() if not p.is_file()})
        if absent:
            raise CheckpointError(f"{directory}: shard(s) listed in {INDEX_FILE} are missing: "
                                  f"{', '.join(absent)}")
        return files
    single = directory / SINGLE_FILE
    if not single.is_file():
        raise CheckpointError(f"{directory} has no {SINGLE_FILE} nor {INDEX_FILE}")
    with TensorFile(single) as f:
        return dict.fromkeys(f.names(), single)


def load_model(directory: Path, device: torch.device, dtype: torch.dtype,
               group: Group | None = None) -> DiffusionLM:
    """Build the model on the meta device, then fill it tensor by tensor from the
    safetensors files (positioned reads, not a memory map: dinfer_engine/loading/tensor_reads.py),
    so no second full copy of the weights exists. A
    parameter that several checkpoint tensors fill (fused experts) is allocated once and
    each tensor is converted into its slice. With `group`, the model is this rank's
    tensor-parallel part (dinfer_engine/parallel/layers.py) and only the slices it holds are
    read from the files."""
    family, cfg = load_config(directory)
    if device.type == "cpu":
        keep_freed_memory()
    with torch.device("meta"):
        model = family(cfg)
        full_shapes = {name: p.shape for name, p in model.named_parameters()}
        shards = shard_model(model, group) if group is not None else {}
    params = dict(model.named_parameters())
    files = weight_files(directory)
    mapping = model.checkpoint_map(set(files))
    _check_names(directory, model, set(mapping), set(files))
    filled = {param: torch.empty(params[param].shape, device=device, dtype=dtype)
              for param, index in mapping.values() if index is not None}
    by_file: dict[Path, list[str]] = {}
    for name, path in files.items():
        if name in mapping:
            by_file.setdefault(path, []).append(name)
    for path, names in by_file.items():
        with TensorFile(path) as f:
            for name in names:
                param, index = mapping[name]
                shard = shards.get(param)
                if shard is None:
                    tensor = f.read(name)
                    target = params[param] if index is None else filled[param][index]
                    expected = target.shape
                else:
                    expected = full_shapes[param] if index is None else torch.empty(
                        full_shapes[param], device="meta")[index].shape
                    local = None if index is None else shard.local_index(index)
                    if index is not None and local is None:
                        continue  # another rank's expert
                    tensor = read_shard(f, name, shard if index is None else None, expected)
                    target = params[param] if local is None else filled[param][local]
                if tuple(tensor.shape) != tuple(target.shape):
                    raise CheckpointError(
                        f"{path.name}: tensor {name} has shape {tuple(tensor.shape)}, "
                        f"config.json implies {tuple(expected)}"
                    )
                if index is None:
                    set_parameter(model, param, tensor.to(device=device, dtype=dtype))
                else:
                    target.copy_(tensor)
    for param, tensor in filled.items():
        set_parameter(model, param, tensor)
    return model.eval()


def _check_names(directory: Path, model: DiffusionLM, expected: set[str],
                 found: set[str]) -> None:
    """CheckpointError naming what the files lack and hold beyond config.json's model."""
    missing = sorted(expected - found)
    unexpected = sorted(n for n in found - expected if not model.ignores(n))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensor(s), e.g. {', '.join(missing[:3])}")
        if unexpected:
            parts.append(f"unexpected {len(unexpected)} tensor(s), e.g. "
                         f"{', '.join(unexpected[:3])}")
        raise CheckpointError(f"{directory}: weights do not match config.json: "
                              + "; ".join(parts))


def check_tensor_parallel(directory: Path, size: int) -> None:
    """ValueError naming the first dimension of the checkpoint's model that does not
    divide by `size` ranks (the model is built on the meta device only)."""
    family, cfg = load_config(directory)
    with torch.device("meta"):
        shard_model(family(cfg), Group(0, size))


def read_shard(f: TensorFile, name: str, shard: Shard | None,
               expected: torch.Size) -> torch.Tensor:
    """Tensor `name`, or only the ranges of `shard`; CheckpointError unless the whole
    tensor has shape `expected`."""
    shape = f.shape(name)
    if shape != tuple(expected):
        raise CheckpointError(f"tensor {name} has shape {shape}, config.json implies "
                              f"{tuple(expected)}")
    if shard is None:
        return f.read(name)
    return f.read(name, shard.dim, shard.ranges)


def set_parameter(model: nn.Module, name: str, tensor: torch.Tensor) -> None:
    module_name, _, attr = name.rpartition(".")
    setattr(model.get_submodule(module_name), attr, nn.Parameter(tensor, requires_grad=False))


def save_model(model: nn.Module, directory: Path, dtype: torch.dtype = torch.bfloat16,
               max_shard_bytes: int | None = None) -> None:
    """Write the weights as safetensors with their checkpoint names, sharded with an index
    when `max_shard_bytes` is set (as `save_pretrained` does)."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {n: p.detach().to("cpu", dtype).contiguous() for n, p in model.named_parameters()}
    if max_shard_bytes is None:
        save_file(tensors, directory / SINGLE_FILE, metadata={"format": "pt"})
        return
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    weight_map = {}
    for i, shard in enumerate(shards, start=1):
        shard_name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, directory / shard_name, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, shard_name))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (directory / INDEX_FILE).write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
