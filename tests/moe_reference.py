"""Slow, obviously-right references for the MoE families, written from the published
formulas, one token (one row) at a time in float64, reading the checkpoint's tensors by
their own names: the LLaDA-MoE and LLaDA2 forwards, and LLaDA2's block-diffusion
generate (blocks on an absolute grid, recomputing the whole window under the
block-causal mask every step, as its published `generate` does)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import load_file

from tests.tiny_model import MASK_ID

Forward = Callable[[torch.Tensor], torch.Tensor]  # ids [L] -> logits [L, V]


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x / math.sqrt(float((x * x).mean()) + eps) * weight


def rope(x: torch.Tensor, position: int, rotary_dim: int, theta: float) -> torch.Tensor:
    """Rotate the pairs (x[i], x[i + rotary_dim/2]) of one head vector by position *
    theta^(-2i/rotary_dim); dims past rotary_dim pass through."""
    out, half = x.clone(), rotary_dim // 2
    for i in range(half):
        angle = position * theta ** (-2 * i / rotary_dim)
        a, b = x[i], x[i + half]
        out[i] = a * math.cos(angle) - b * math.sin(angle)
        out[i + half] = b * math.cos(angle) + a * math.sin(angle)
    return out


def swiglu(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
           down: torch.Tensor) -> torch.Tensor:
    g = gate @ x
    return down @ (g / (1 + torch.exp(-g)) * (up @ x))


class ReferenceMoE:
    """Either family's forward from its checkpoint directory; `block_length` set: LLaDA2's
    block-causal attention (key k visible to query q iff k // B <= q // B)."""

    def __init__(self, directory: Path) -> None:
        self.c = json.loads((directory / "config.json").read_text())
        self.w = {n: t.double() for n, t in load_file(directory / "model.safetensors").items()}
        self.llada2 = self.c["model_type"] in ("llada2_moe", "llada21_moe")  # one layout

    def __call__(self, ids: torch.Tensor, block_length: int | None = None) -> SimpleNamespace:
        return SimpleNamespace(logits=self.logits(ids[0], block_length)[None])

    def logits(self, ids: torch.Tensor, block_length: int | None = None) -> torch.Tensor:
        c, w = self.c, self.w
        embed = w["model.word_embeddings.weight" if self.llada2 else "model.embed_tokens.weight"]
        xs = [embed[int(t)] for t in ids]
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}"
            normed = [rms(x, w[f"{p}.input_layernorm.weight"], c["rms_norm_eps"]) for x in xs]
            attn = self.attention(p, normed, block_length)
            xs = [x + a for x, a in zip(xs, attn, strict=True)]
            normed = [rms(x, w[f"{p}.post_attention_layernorm.weight"], c["rms_norm_eps"])
                      for x in xs]
            xs = [x + self.mlp(i, h) for x, h in zip(xs, normed, strict=True)]
        head = w.get("lm_head.weight", embed)
        return torch.stack([head @ rms(x, w["model.norm.weight"], c["rms_norm_eps"])
                            for x in xs]).float()

    def attention(self, p: str, xs: list[torch.Tensor],
                  block_length: int | None) -> list[torch.Tensor]:
        c, w = self.c, self.w
        heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
        d = c.get("head_dim") or c["hidden_size"] // heads
        rot = int(d * c.get("partial_rotary_factor", 1.0))
        eps, theta = c["rms_norm_eps"], c["rope_theta"]
        if self.llada2:
            qkv = w[f"{p}.attention.query_key_value.weight"]
            wq, wk, wv = qkv[:heads * d], qkv[heads * d:(heads + kv) * d], qkv[(heads + kv) * d:]
            qn, kn = w[f"{p}.attention.query_layernorm.weight"], w[
                f"{p}.attention.key_layernorm.weight"]
            wo = w[f"{p}.attention.dense.weight"]
        else:
            wq, wk, wv, wo = (w[f"{p}.self_attn.{n}_proj.weight"] for n in "qkvo")
            qn, kn = w[f"{p}.self_attn.q_norm.weight"], w[f"{p}.self_attn.k_norm.weight"]
        keys, values = [], []
        for pos, x in enumerate(xs):
            k, v = (wk @ x).view(kv, d), (wv @ x).view(kv, d)
            keys.append([rope(rms(k[h], kn, eps), pos, rot, theta) for h in range(kv)])
            values.append([v[h] for h in range(kv)])
        out = []
        for qpos, x in enumerate(xs):
            q = (wq @ x).view(heads, d)
            visible = [k for k in range(len(xs))
                       if block_length is None or k // block_length <= qpos // block_length]
            head_outs = []
            for h in range(heads):
                g = h // (heads // kv)  # the KV head this query head shares
                qh = rope(rms(q[h], qn, eps), qpos, rot, theta)
                scores = torch.stack([qh @ keys[k][g] for k in visible]) / math.sqrt(d)
                probs = torch.exp(scores - scores.max())
                probs = probs / probs.sum()
                head_outs.append(sum(pr * values[k][g] for pr, k in zip(probs, visible,
                                                                          strict=True)))
            out.append(wo @ torch.cat(head_outs))
        return out

    def mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        c, w, p = self.c, self.w, f"model.layers.{layer}.mlp"
        moe = (layer >= c["first_k_dense_replace"] if self.llada2
               else c["moe_layer_freq"][layer])
        if not moe:
            return swiglu(x, w[f"{p}.gate_proj.weight"], w[f"{p}.up_proj.weight"],
                          w[f"{p}.down_proj.weight"])
        chosen, weights = (self.route_llada2 if self.llada2 else self.route_llada_moe)(p, x)
        out = sum(weight * swiglu(x, *self.expert(p, j)) for j, weight in zip(chosen, weights,
                                                                             strict=True))
        shared = (f"{p}.shared_experts" if self.llada2
                  else f"model.layers.{layer}.shared_expert")
        if f"{shared}.gate_proj.weight" in w:
            out = out + swiglu(x, w[f"{shared}.gate_proj.weight"], w[f"{shared}.up_proj.weight"],
                               w[f"{shared}.down_proj.weight"])
        return out

    def expert(self, p: str, j: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        w = self.w
        if f"{p}.w1" in w:  # fused: per expert cat(gate, up), and down
            inner = w[f"{p}.w1"].shape[1] // 2
            return w[f"{p}.w1"][j, :inner], w[f"{p}.w1"][j, inner:], w[f"{p}.w2"][j]
        e = f"{p}.experts.{j}"
        return (w[f"{e}.gate_proj.weight"], w[f"{e}.up_proj.weight"],
                w[f"{e}.down_proj.weight"])

    def route_llada_moe(self, p: str, x: torch.Tensor) -> tuple[list[int], list[float]]:
        """softmax over experts, plus the expert bias; the k largest biased values choose
        the experts and weight them; no renormalisation."""
        logits = (self.w[f"{p}.gate.weight"] @ x).tolist()
        top = max(logits)
        exps = [math.exp(v - top) for v in logits]
        probs = [e / sum(exps) for e in exps]
        if f"{p}.expert_bias" in self.w:
            probs = [pr + float(b) for pr, b in zip(probs, self.w[f"{p}.expert_bias"],
                                                    strict=True)]
        chosen = sorted(range(len(probs)), key=lambda j: -probs[j])[:self.c["num_experts_per_tok"]]
        return chosen, [probs[j] for j in chosen]

    def route_llada2(self, p: str, x: torch.Tensor) -> tuple[list[int], list[float]]:
        """s = sigmoid(logits); routing score s + bias; groups scored by their two best
        routing scores, the topk_group best groups kept; top-k experts of those by routing
        score; weights s / sum(s) of the chosen (k > 1), times routed_scaling_factor."""
        c = self.c
        s = [1 / (1 + math.exp(-v)) for v in (self.w[f"{p}.gate.weight"] @ x).tolist()]
        bias = self.w[f"{p}.gate.expert_bias"].tolist()
        routing = [a + b for a, b in zip(s, bias, strict=True)]
        size = len(s) // c["n_group"]
        group_score = [sum(sorted(routing[g * size:(g + 1) * size], reverse=True)[:2])
                       for g in range(c["n_group"])]
        groups = sorted(range(c["n_group"]), key=lambda g: -group_score[g])[:c["topk_group"]]
        candidates = [j for g in groups for j in range(g * size, (g + 1) * size)]
        chosen = sorted(candidates, key=lambda j: -routing[j])[:c["num_experts_per_tok"]]
        weights = [s[j] for j in chosen]
        if len(chosen) > 1:
            weights = [v / sum(weights) for v in weights]
        return chosen, [v * c["routed_scaling_factor"] for v in weights]


def linear_counts(block_length: int, steps: int) -> list[int]:
    return [block_length // steps + (1 if i < block_length % steps else 0) for i in range(steps)]


def llada2_generate(forward: Forward, prompt: list[int], gen_length: int, block_length: int,
                    steps: int, threshold: float | None, eos_id: int | None = None
                    ) -> tuple[list[int], int]:
    """LLaDA2's published generate, greedy: blocks k*B..(k+1)*B-1 from the first prompt
    token; from the block holding the prompt's end, each block is denoised over up to
    `steps` steps, each step running `forward` on the whole window up to the block's end.
    threshold None: commit the schedule's count of most confident masked tokens;
    otherwise every masked token with confidence > threshold when there are at least the
    schedule's count of them, else that count of the most confident. With eos_id, stop
    after the block in which it first appears. Returns (answer up to gen_length,
    forwards); the caller cuts at EOS."""
    p = len(prompt)
    blocks = -(-(p + gen_length) // block_length)
    x = torch.full((blocks * block_length,), MASK_ID, dtype=torch.long)
    x[:p] = torch.tensor(prompt)
    schedule, forwards = linear_counts(block_length, steps), 0
    for b in range(p // block_length, blocks):
        start, end = b * block_length, (b + 1) * block_length
        for step in range(steps):
            masked = x[start:end] == MASK_ID
            if not masked.any():
                break
            logits = forward(x[:end])[start:end].double()
            forwards += 1
            probs = logits.softmax(-1)
            logits[:, MASK_ID] = -torch.inf  # the engine's one documented deviation
            tokens = logits.argmax(-1)
            confidence = torch.where(masked, probs.gather(1, tokens[:, None])[:, 0], -torch.inf)
            high = confidence > threshold if threshold is not None else None
            if high is not None and int(high.sum()) >= schedule[step]:
                chosen = high
            else:
                count = min(schedule[step], int(masked.sum()))
                chosen = torch.zeros_like(masked)
                chosen[confidence.topk(count).indices] = True
            x[start:end] = torch.where(chosen, tokens, x[start:end])
        if eos_id is not None and (x[p:end] == eos_id).any():
            break
    return x[p:p + gen_length].tolist(), forwards


def block_causal_mask(length: int, block_length: int) -> torch.Tensor:
    blocks = torch.arange(length) // block_length
    return blocks[None, :] <= blocks[:, None]
