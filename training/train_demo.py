"""Train the bundled demo model (models/demo) with LLaDA's SFT objective.

For each example the prompt is kept and every answer token (the answer, then EOS up to
the answer region's end) is masked with probability t ~ U(eps, 1); the loss is the
cross-entropy on masked positions weighted by 1/t, averaged over answer tokens.
Deterministic for a seed (data and masks derive from seed and step), resumable from the
last checkpoint in --work-dir, and it exports the EMA weights in the LLaDA layout.

    python -m training.train_demo --work-dir ~/.cache/dinfer-batch/demo-train --export models/demo
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from engine.models.config import LLaDAConfig
from engine.models.llada import LLaDAModelLM
from training.char_tokenizer import EOS, MASK, PAD, save_char_tokenizer
from training.export import GENERATION_DEFAULTS, export_demo
from training.tasks import ANSWER_REGION, CHARS, HELD_OUT_PER_TASK, TRAINING_MAKERS, eval_set

GEN_LENGTH = GENERATION_DEFAULTS["gen_length"]  # the longest short answer (21 chars) + EOS fits
# a batch is "short" (short tasks only, 24-token answer regions) or "long" (half `count`,
# half short tasks, 64-token regions, so short answers also learn to fill long regions)
SHORT_WEIGHTS = {"add": 0.35, "sort": 0.1, "rev": 0.3, "code": 0.25}
LONG_WEIGHTS = {**{task: w / 2 for task, w in SHORT_WEIGHTS.items()}, "count": 0.5}
EPS = 1e-3


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


def make_batch(step: int, seed: int, size: int, tok: dict[str, int], held_out: set[str],
               eos_id: int, long_share: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [B, L] (prompt, answer, EOS fill to the answer region, then EOS to the
    batch's length) and the answer-region mask [B, L]. With probability `long_share` the
    batch is a long one (LONG_WEIGHTS, 64-token regions), else short (SHORT_WEIGHTS)."""
    rng = random.Random(seed * 1_000_003 + step)
    mix = LONG_WEIGHTS if rng.random() < long_share else SHORT_WEIGHTS
    tasks, weights = list(mix), list(mix.values())
    rows: list[tuple[list[int], list[int]]] = []
    while len(rows) < size:
        ex = TRAINING_MAKERS[rng.choices(tasks, weights)[0]](rng)
        if ex.prompt not in held_out:
            rows.append(([tok[c] for c in ex.prompt], [tok[c] for c in ex.answer]))
    length = max(len(p) for p, _ in rows) + max(ANSWER_REGION[task] for task in tasks)
    ids = torch.full((size, length), eos_id, dtype=torch.long)
    answer = torch.zeros(size, length, dtype=torch.bool)
    for i, (prompt, ans) in enumerate(rows):
        ids[i, : len(prompt)] = torch.tensor(prompt)
        ids[i, len(prompt): len(prompt) + len(ans)] = torch.tensor(ans)
        answer[i, len(prompt):] = True
    return ids, answer


def sft_loss(model: LLaDAModelLM, ids: torch.Tensor, answer: torch.Tensor, mask_id: int,
             gen: torch.Generator) -> torch.Tensor:
    b = ids.shape[0]
    t = (1 - EPS) * torch.rand(b, 1, generator=gen) + EPS
    masked = answer & (torch.rand(ids.shape, generator=gen) < t)
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    logits = model(noisy).logits
    ce = F.cross_entropy(logits[masked], ids[masked], reduction="none")
    weights = (1 / t.expand_as(ids))[masked]
    return (ce * weights).sum() / answer.sum()


def learning_rate(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def main() -> None:
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
    ap.add_argument("--long-share", type=float, default=0.0,
                    help="share of batches with the long `count` task and 64-token regions")
    ap.add_argument("--init-from", type=Path,
                    help="start from this exported checkpoint's weights (fine-tuning)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--save-every", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.work_dir.mkdir(parents=True, exist_ok=True)

    tok_dir = args.work_dir / "tokenizer"
    tokenizer = save_char_tokenizer(CHARS, tok_dir)
    vocab = tokenizer.get_vocab()
    mask_id, eos_id, pad_id = vocab[MASK], vocab[EOS], vocab[PAD]
    raw_config = model_config(len(vocab), mask_id, eos_id, pad_id, args.d_model, args.n_layers)
    torch.manual_seed(args.seed)
    model = LLaDAModelLM(LLaDAConfig.from_dict(raw_config))
    torch.nn.init.normal_(model.model.transformer["wte"].weight, std=0.02)
    if args.init_from:
        if json.loads((args.init_from / "config.json").read_text()) != raw_config:
            raise SystemExit(f"{args.init_from}: config differs from the one being trained")
        start = load_file(args.init_from / "model.safetensors")
        model.load_state_dict({n: t.float() for n, t in start.items()})
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
    held_out = {ex.prompt for ex in eval_set(HELD_OUT_PER_TASK)}
    char_ids = {c: vocab[c] for c in CHARS}
    log = (args.work_dir / "log.jsonl").open("a")
    stop_at = min(args.steps, args.stop_at or args.steps)
    started, losses = time.time(), []
    while step < stop_at:
        ids, answer = make_batch(step, args.seed, args.batch_size, char_ids, held_out, eos_id,
                                 args.long_share)
        gen = torch.Generator().manual_seed(args.seed * 7919 + step)
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, args.steps, args.lr, args.warmup)
        loss = sft_loss(model, ids, answer, mask_id, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            decay = min(0.999, (1 + step) / (10 + step))
            for n, p in model.named_parameters():
                ema[n].mul_(decay).add_(p.detach(), alpha=1 - decay)
        step += 1
        losses.append(loss.item())
        if step % args.save_every == 0 or step == stop_at:
            record = {"step": step, "loss": sum(losses) / len(losses),
                      "lr": learning_rate(step - 1, args.steps, args.lr, args.warmup),
                      "sec_per_step": (time.time() - started) / len(losses)}
            log.write(json.dumps(record) + "\n")
            log.flush()
            print(json.dumps(record), flush=True)
            started, losses = time.time(), []
            tmp = ckpt_path.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "ema": ema,
                        "step": step}, tmp)
            tmp.replace(ckpt_path)
            if args.export:
                export_demo(ema, raw_config, tok_dir, args.export, step)


if __name__ == "__main__":
    main()
