"""The demo model's training pipeline: tasks, tokenizer, SFT objective, resumability."""

import json
import random
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from training.char_tokenizer import save_char_tokenizer
from training.tasks import (
    ANSWER_REGION,
    CHARS,
    CODE_TEMPLATES,
    MAKERS,
    TASKS,
    TRAINING_MAKERS,
    check,
    eval_set,
    held_out,
)
from training.train_demo import GEN_LENGTH, make_batch


def test_task_answers_are_correct():
    rng = random.Random(5)
    for _ in range(200):
        add, srt, rev = MAKERS["add"](rng), MAKERS["sort"](rng), MAKERS["rev"](rng)
        a, b = map(int, add.prompt[4:-1].split())
        assert add.answer == str(a + b)
        digits = srt.prompt[5:-1]
        assert 4 <= len(digits) <= 8 and srt.answer == "".join(sorted(digits))
        word = rev.prompt[4:-1]
        assert 3 <= len(word) <= 8 and rev.answer == word[::-1]
        code = MAKERS["code"](rng)
        name = code.prompt[4:code.prompt.index("(")]
        args = code.prompt[code.prompt.index("(") + 1: -2].split(", ")
        (template,) = [body for names, _, body in CODE_TEMPLATES.values() if name in names]
        assert code.answer == template.format(*args)
        assert check(code, template.format(*args)) and not check(code, template)
        count = MAKERS["count"](rng)
        start, end = map(int, count.prompt[6:-1].split())
        assert count.answer == " ".join(str(n) for n in range(start, end + 1))
        assert 24 <= len(count.answer) <= 63 and 0 <= start <= 999


def test_training_draws_each_addend_digit_count_uniformly():
    rng = random.Random(3)
    digits = [len(n) for _ in range(3000)
              for n in TRAINING_MAKERS["add"](rng).prompt[4:-1].split()]
    shares = [digits.count(k) / len(digits) for k in (1, 2, 3)]
    assert all(abs(share - 1 / 3) < 0.03 for share in shares), shares


def test_the_short_tasks_held_out_set_is_the_one_the_shipped_model_was_scored_on():
    """Adding `count` after the four original tasks leaves their held-out sets as they
    were (the same seed draws them first); pinned by the first prompts."""
    first = [held_out()[task][0].prompt for task in TASKS]
    assert first == ["add 989 796=", "sort 72031=", "rev vzw=", "def item(gd, ny):",
                     "count 195 205="]


def test_eval_set_is_deterministic_distinct_and_fits_the_answer_region():
    first, second = eval_set(50), eval_set(50)
    assert first == second and len(first) == 50 * len(TASKS)
    assert len({ex.prompt for ex in first}) == len(first)
    assert set(first) <= set(eval_set(500))  # smaller sets are held out too
    assert [ex.task for ex in first[::50]] == list(TASKS)
    assert all(len(ex.answer) < ANSWER_REGION[ex.task] for ex in eval_set(500))


def test_training_batches_exclude_held_out_prompts_and_are_deterministic(tmp_path):
    save_char_tokenizer(CHARS, tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    vocab = tok.get_vocab()
    char_ids = {c: vocab[c] for c in CHARS}
    eos = tok.eos_token_id
    held_out = {ex.prompt for ex in eval_set(20)}
    ids, answer = make_batch(3, 0, 64, char_ids, held_out, eos, long_share=0.5)
    again, _ = make_batch(3, 0, 64, char_ids, held_out, eos, long_share=0.5)
    assert torch.equal(ids, again)
    for row, region in zip(ids.tolist(), answer.tolist(), strict=True):
        start = region.index(True)
        prompt = tok.decode(row[:start])
        assert prompt not in held_out and prompt.endswith(("=", ":"))
        assert sum(region) >= GEN_LENGTH and row[-1] == eos  # answer region ends in EOS


def test_char_tokenizer_round_trips_through_auto_tokenizer(tmp_path):
    save_char_tokenizer(CHARS, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    tok = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = "def get(al, m): return al[m] % 2 == 0"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids + [tok.eos_token_id] * 3, skip_special_tokens=True) == text


def train(work_dir, *extra):
    cmd = [sys.executable, "-m", "training.train_demo", "--work-dir", str(work_dir),
           "--d-model", "32", "--n-layers", "1", "--batch-size", "8", "--steps", "6",
           "--save-every", "2", "--threads", "1", *extra]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)


@pytest.mark.timeout(300)
def test_training_resumes_to_the_same_weights_and_exports_a_loadable_checkpoint(tmp_path):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(straight, "--export", str(straight / "export"))
    train(resumed, "--stop-at", "2")
    train(resumed)
    a = torch.load(straight / "ckpt.pt", weights_only=False)
    b = torch.load(resumed / "ckpt.pt", weights_only=False)
    assert a["step"] == b["step"] == 6
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    log = [json.loads(line) for line in (straight / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [2, 4, 6]

    export = straight / "export"
    weights = load_file(export / "model.safetensors")
    assert "model.transformer.blocks.0.ff_proj.weight" in weights
    assert torch.allclose(weights["model.transformer.ln_f.weight"].float(),
                          a["ema"]["model.transformer.ln_f.weight"].to(torch.bfloat16).float())
    generation = json.loads((export / "generation_config.json").read_text())
    assert generation["gen_length"] == GEN_LENGTH and generation["trained_steps"] == 6
    config = json.loads((export / "config.json").read_text())
    assert config["model_type"] == "llada" and config["block_type"] == "llama"


def test_sft_loss_masks_only_the_answer_and_weights_by_one_over_t():
    from engine.models.config import LLaDAConfig
    from engine.models.llada import LLaDAModelLM
    from training.train_demo import sft_loss

    cfg = LLaDAConfig.from_dict(dict(model_type="llada", d_model=32, n_layers=1, n_heads=2,
                                     vocab_size=20, mask_token_id=19, eos_token_id=1))
    model = LLaDAModelLM(cfg)
    seen = []
    model.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    ids = torch.randint(4, 18, (16, 12))
    answer = torch.zeros_like(ids, dtype=torch.bool)
    answer[:, 5:] = True
    loss = sft_loss(model, ids, answer, 19, torch.Generator().manual_seed(0))
    noisy = seen[0]
    assert torch.equal(noisy[:, :5], ids[:, :5])  # the prompt is never masked
    masked = noisy == 19
    assert masked[:, 5:].any() and torch.equal(noisy[~masked], ids[~masked])
    # recompute by hand: cross-entropy on masked positions, weighted by 1/t
    gen = torch.Generator().manual_seed(0)
    t = (1 - 1e-3) * torch.rand(16, 1, generator=gen) + 1e-3
    logits = model(noisy).logits
    ce = torch.nn.functional.cross_entropy(logits[masked], ids[masked], reduction="none")
    expected = (ce / t.expand_as(ids)[masked]).sum() / answer.sum()
    assert torch.allclose(loss, expected)
