"""Train the bundled demo model (dinfer_models/demo) with LLaDA's SFT objective, mixed with
LLaDA2.1's token-editing objective on a share of the rows (dinfer_training/objective.py), on
batches of the kinds --mix names (dinfer_training/batches.py).

Deterministic for a seed (data and masks derive from seed and step), resumable from the
last checkpoint in --work-dir, and it exports the EMA weights in the LLaDA layout.
--init-from starts from an exported checkpoint, also one with a shorter vocabulary whose
tokens keep their ids (new embedding and output rows start small and random).

    python -m dinfer_training.train_demo --work-dir ~/.cache/dinfer-batch/demo-train \
        --export dinfer_models/demo

dinfer_training/README.md gives the commands that trained the shipped model.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from dinfer_engine.models.config import LLaDAConfig
from dinfer_engine.models.llada import LLaDAModelLM
from dinfer_training.batches import Batch, make_batch, parse_mix
from dinfer_training.char_tokenizer import EOS, MASK, PAD, save_char_tokenizer
from dinfer_training.export import export_demo
from dinfer_training.objective import training_loss
from dinfer_training.tasks import BASE_CHARS, CHARS, held_out_keys


def model_config(vocab_size: int, mask_id: int, eos_id: int, pad_id: int, d_model: int,
                 n_layers: int) -> dict:
    """LLaDA-8B-Instruct's config.json field set, scaled down (head dim 32, SwiGLU hidden
    about 8/3 of d_model, rounded down to a multiple of 32)."""
    heads = d_model // 32
    return {
        "architectures": ["LLaDAModelLM"], "model_type": "llada", "activation_type": "silu",
        "alibi": False, "alibi_bias_max": 8.0, "attention_dropout": 0.0,
        "attention_layer_norm": False, "attention_layer_norm_with_affine": True,
        "bias_for_layer_norm": False, "block_group_size": 1, "block_type": "llama",
        "d_model": d_model, "embedding_dropout": 0.0, "embedding_size": vocab_size,
        "eos_token_id": eos_id, "flash_attention": False, "include_bias": False,
        "include_qkv_bias": False, "init_cutoff_factor": None, "init_device": "meta",
        "init_fn": "mitchell", "init_std": 0.02, "input_emb_norm": False,
        "layer_norm_type": "rms", "layer_norm_with_affine": True, "mask_token_id": mask_id,
        "max_sequence_length": 256, "mlp_hidden_size": d_model * 8 // 3 // 32 * 32,
        "mlp_ratio": 4,
        "multi_query_attention": None, "n_heads": heads, "n_kv_heads": heads,
        "n_layers": n_layers,
        "pad_token_id": pad_id, "precision": "amp_bf16", "residual_dropout": 0.0,
        "rms_norm_eps": 1e-5, "rope": True, "rope_full_precision": True,
        "rope_theta": 10000.0, "scale_logits": False, "torch_dtype": "bfloat16",
        "use_cache": False, "vocab_size": vocab_size, "weight_tying": False,
    }


def learning_rate(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def load_init(model: LLaDAModelLM, directory: Path, raw_config: dict,
              vocab: dict[str, int]) -> None:
    """Load an exported checkpoint's weights; a shorter vocabulary is extended (its tokens
    must keep their ids) with the new rows as initialised: the output rows scaled down,
    so new tokens start unlikely."""
    old_config = json.loads((directory / "config.json").read_text())
    sized = ("vocab_size", "embedding_size")
    if {k: v for k, v in old_config.items() if k not in sized} != \
            {k: v for k, v in raw_config.items() if k not in sized}:
        raise SystemExit(f"{directory}: config differs from the one being trained")
    old_vocab = json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"]
    if any(vocab.get(token) != i for token, i in old_vocab.items()):
        raise SystemExit(f"{directory}: its tokens do not keep their ids in the new vocabulary")
    state = {n: t.float() for n, t in load_file(directory / "model.safetensors").items()}
    own = model.state_dict()
    for name in ("model.transformer.wte.weight", "model.transformer.ff_out.weight"):
        grown = own[name].clone()
        if name.endswith("ff_out.weight"):
            grown *= 0.1
        grown[: state[name].shape[0]] = state[name]
        state[name] = grown
    model.load_state_dict(state)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--work-dir", type=Path, required=True, help="checkpoints and log")
    ap.add_argument("--export", type=Path, help="write the EMA model here at each save")
    ap.add_argument("--steps", type=int, default=14000)
    ap.add_argument("--stop-at", type=int, help="pause after this step (resume later)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-layers", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=300, help="learning-rate warm-up steps")
    ap.add_argument("--mix", type=parse_mix, default=parse_mix("short=1"),
                    help="batch kinds and their shares, e.g. short=0.3,long=0.2,json=0.25,"
                         "infill=0.25 (kinds: dinfer_training/batches.py)")
    ap.add_argument("--edit-share", type=float, default=0.0,
                    help="share of rows also trained with the token-editing objective")
    ap.add_argument("--vocab", choices=["v2", "v3"], default="v3",
                    help="v2: the 49 characters of demo v1/v2; v3: with JSON and code characters")
    ap.add_argument("--init-from", type=Path,
                    help="start from this exported checkpoint's weights (fine-tuning)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=200)
    return ap


def _train_step(model: LLaDAModelLM, opt: torch.optim.Optimizer,
                ema: dict[str, torch.Tensor], batch: Batch, step: int,
                args: argparse.Namespace, mask_id: int, eos_id: int) -> float:
    """One optimiser step on `batch` and the EMA's update; the step's loss."""
    gen = torch.Generator().manual_seed(args.seed * 7919 + step)
    for group in opt.param_groups:
        group["lr"] = learning_rate(step, args.steps, args.lr, args.warmup)
    loss = training_loss(model, batch, mask_id, eos_id, gen, args.edit_share)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    with torch.no_grad():
        decay = min(0.999, (1 + step) / (10 + step))
        for n, p in model.named_parameters():
            ema[n].mul_(decay).add_(p.detach(), alpha=1 - decay)
    return loss.item()


def main() -> None:
    args = _parser().parse_args()
    torch.set_num_threads(args.threads)
    args.work_dir.mkdir(parents=True, exist_ok=True)

    tok_dir = args.work_dir / "tokenizer"
    chars = CHARS if args.vocab == "v3" else BASE_CHARS
    if args.vocab == "v2" and set(args.mix) - {"short", "long"}:
        raise SystemExit("--vocab v2 has no JSON or code characters: use --mix short and long")
    tokenizer = save_char_tokenizer(BASE_CHARS, tok_dir, appended=chars[len(BASE_CHARS):])
    vocab = tokenizer.get_vocab()
    mask_id, eos_id, pad_id = vocab[MASK], vocab[EOS], vocab[PAD]
    raw_config = model_config(len(vocab), mask_id, eos_id, pad_id, args.d_model, args.n_layers)
    torch.manual_seed(args.seed)
    model = LLaDAModelLM(LLaDAConfig.from_dict(raw_config))
    torch.nn.init.normal_(model.embedding().weight, std=0.02)
    if args.init_from:
        load_init(model, args.init_from, raw_config, vocab)
    ema = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98),
                            weight_decay=0.01)
    ckpt_path = args.work_dir / "ckpt.pt"
    step = 0
    if ckpt_path.exists():
        state = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        ema, step = state["ema"], state["step"]
        print(f"resumed at step {step}", flush=True)
    held_out = held_out_keys()
    char_ids = {c: vocab[c] for c in chars}
    log = (args.work_dir / "log.jsonl").open("a")
    stop_at = min(args.steps, args.stop_at or args.steps)
    started, losses = time.time(), []
    by_kind: dict[str, list[float]] = {}
    while step < stop_at:
        batch = make_batch(step, args.seed, args.batch_size, char_ids, held_out, pad_id,
                           eos_id, args.mix)
        loss = _train_step(model, opt, ema, batch, step, args, mask_id, eos_id)
        step += 1
        losses.append(loss)
        by_kind.setdefault(batch.kind, []).append(loss)
        if step % args.save_every == 0 or step == stop_at:
            record = {"step": step, "loss": sum(losses) / len(losses),
                      "lr": learning_rate(step - 1, args.steps, args.lr, args.warmup),
                      "sec_per_step": (time.time() - started) / len(losses),
                      "loss_by_kind": {k: round(sum(v) / len(v), 5) for k, v in by_kind.items()}}
            log.write(json.dumps(record) + "\n")
            log.flush()
            print(json.dumps(record), flush=True)
            started, losses, by_kind = time.time(), [], {}
            tmp = ckpt_path.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "ema": ema,
                        "step": step}, tmp)
            tmp.replace(ckpt_path)
            if args.export:
                export_demo(ema, raw_config, tok_dir, args.export, step)


if __name__ == "__main__":
    main()
