"""The demo model's training pipeline: tasks, tokenizer, SFT objective, resumability."""

import json
import random
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from dinfer_training.batches import make_batch, parse_mix
from dinfer_training.char_tokenizer import save_char_tokenizer
from dinfer_training.export import GENERATION_DEFAULTS
from dinfer_training.tasks import (
    ANSWER_REGION,
    BASE_CHARS,
    CHARS,
    CODE_TEMPLATES,
    MAKERS,
    TASKS,
    TRAINING_MAKERS,
    answer_region,
    check,
    eval_set,
    held_out,
    held_out_keys,
)

GEN_LENGTH = GENERATION_DEFAULTS["gen_length"]
MIX = parse_mix("short=0.3,long=0.2,json=0.25,infill=0.25")


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


def test_the_older_tasks_held_out_sets_are_the_ones_earlier_models_were_scored_on():
    """Tasks added after the original ones (`count`, then the JSON tasks and infill) leave
    the earlier held-out sets as they were (the same seed draws them first); pinned by
    the first prompts."""
    first = [held_out()[task][0].prompt for task in TASKS]
    assert first == ["add 989 796=", "sort 72031=", "rev vzw=", "def item(gd, ny):",
                     "count 195 205=", "json add 182 915=", "json rev docwuug=",
                     "json sort 190468=", 'json add 720 521={"sum": 12']
    last = [held_out()[task][-1].prompt for task in TASKS[:5]]  # as before the JSON tasks
    assert last == ["add 377 805=", "sort 391031=", "rev uiwihxiv=", "def total(y, clh):",
                    "count 864 870="]


def test_eval_set_is_deterministic_distinct_and_fits_the_answer_region():
    first, second = eval_set(50), eval_set(50)
    assert first == second and len(first) == 50 * len(TASKS)
    assert len({(ex.prompt, ex.suffix) for ex in first}) == len(first)
    assert set(first) <= set(eval_set(500))  # smaller sets are held out too
    assert [ex.task for ex in first[::50]] == list(TASKS)
    completions = [ex for ex in eval_set(500) if not ex.span]  # an EOS follows the answer
    assert all(len(ex.answer) < answer_region(ex) for ex in completions)
    infills = held_out()["infill"]  # the span holds the middle, EOS optional
    assert all(len(ex.answer) <= answer_region(ex) <= ANSWER_REGION["infill"] for ex in infills)
    assert all(set(ex.prompt + ex.answer + ex.suffix) <= set(CHARS) for ex in eval_set(500))


def test_json_answers_are_valid_content_and_fit_their_region():
    jsonschema = pytest.importorskip("jsonschema")
    from dinfer_training.json_tasks import JSON_SCHEMAS, JSON_TASKS, same_content

    rng = random.Random(7)
    for _ in range(100):
        for task in JSON_TASKS:
            ex = TRAINING_MAKERS[task](rng)
            value = json.loads(ex.answer)
            jsonschema.validate(value, JSON_SCHEMAS[task])
            assert len(ex.answer) < ANSWER_REGION[task]
            assert same_content(ex, json.dumps(value, indent=1)) and check(ex, ex.answer)
    add = MAKERS["json_add"](rng)
    a, b = map(int, add.prompt[9:-1].split())
    assert json.loads(add.answer) == {"a": a, "b": b, "sum": a + b}
    assert add.answer.startswith(f'{{"sum": {a + b}, ')  # the sum first, as in `add`
    rev = MAKERS["json_rev"](rng)
    word = rev.prompt[9:-1]
    assert json.loads(rev.answer) == {"word": word, "reversed": word[::-1]}
    srt = MAKERS["json_sort"](rng)
    digits = srt.prompt[10:-1]
    assert json.loads(srt.answer) == {"sorted": sorted(map(int, digits)), "length": len(digits)}
    assert not same_content(srt, srt.answer[:-1]) and not same_content(srt, "[]")


def test_infill_examples_cut_a_middle_out_of_their_source():
    rng = random.Random(11)
    for _ in range(300):
        ex = TRAINING_MAKERS["infill"](rng)
        text = ex.prompt + ex.answer + ex.suffix
        assert 1 <= len(ex.answer) <= 24 and len(ex.answer) <= ex.span <= len(ex.answer) + 8
        if ex.source.startswith("def ") and "\n" in ex.source:
            assert text == ex.source and ex.prompt.startswith(ex.source.split("\n")[0] + "\n")
        else:  # a task prompt, and the gap lies in its answer
            assert text.startswith(ex.source) and len(ex.prompt) >= len(ex.source)


def test_training_batches_exclude_held_out_examples_and_are_deterministic(tmp_path):
    save_char_tokenizer(BASE_CHARS, tmp_path, appended=CHARS[len(BASE_CHARS):])
    tok = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    vocab = tok.get_vocab()
    char_ids = {c: vocab[c] for c in CHARS}
    eos, pad = tok.eos_token_id, tok.pad_token_id
    keys = held_out_keys()
    kinds = set()
    for step in range(12):
        batch = make_batch(step, 0, 32, char_ids, keys, pad, eos, MIX)
        again = make_batch(step, 0, 32, char_ids, keys, pad, eos, MIX)
        assert torch.equal(batch.ids, again.ids) and batch.kind == again.kind
        kinds.add(batch.kind)
        for i, (row, region) in enumerate(zip(batch.ids.tolist(), batch.region.tolist(),
                                              strict=True)):
            start = region.index(True)
            end = len(region) - region[::-1].index(True)
            prompt = tok.decode(row[:start])
            assert prompt not in keys
            if batch.keys is None:  # a completion: the region runs to the end, in EOS
                assert prompt.endswith(("=", ":")) and end == len(row) and row[-1] == eos
                assert sum(region) >= GEN_LENGTH
            else:  # infill: prompt, span (middle then EOS), suffix, hidden padding
                visible = batch.keys[i].tolist()
                length = visible.index(False) if False in visible else len(visible)
                assert all(visible[:length]) and not any(visible[length:])
                assert all(t == pad for t in row[length:]) and pad not in row[:length]
                span = row[start:end]  # the middle, then only EOS
                first_eos = span.index(eos) if eos in span else len(span)
                assert first_eos > 0 and set(span[first_eos:]) <= {eos}
                assert eos not in row[end:length]  # the suffix is text
    assert kinds == {"short", "long", "json", "infill"}


def test_parse_mix_names_the_bad_part():
    assert parse_mix("short=1,json=0.5") == {"short": 1.0, "json": 0.5}
    for bad, words in (("shrt=1", "unknown batch kind"), ("short", "KIND=WEIGHT"),
                       ("short=-1", "negative"), ("short=0", "sum to zero")):
        with pytest.raises(ValueError, match=words):
            parse_mix(bad)


def test_v3_vocabulary_keeps_the_v2_ids(tmp_path):
    v2 = save_char_tokenizer(BASE_CHARS, tmp_path / "v2").get_vocab()
    v3 = save_char_tokenizer(BASE_CHARS, tmp_path / "v3",
                             appended=CHARS[len(BASE_CHARS):]).get_vocab()
    assert len(v2) == 53 and len(v3) == 4 + len(CHARS) == 100
    assert {t: v3[t] for t in v2} == v2
    assert [v3[c] for c in '{}"\n'] == [79, 80, 81, 90]


def test_char_tokenizer_round_trips_through_auto_tokenizer(tmp_path):
    save_char_tokenizer(BASE_CHARS, tmp_path, appended=CHARS[len(BASE_CHARS):])
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    tok = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    text = 'def get(al, m):\n    return al[m] % 2 == 0 {"A": "x.y!"}\t'
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids + [tok.eos_token_id] * 3, skip_special_tokens=True) == text


def train(work_dir, *extra):
    cmd = [sys.executable, "-m", "dinfer_training.train_demo", "--work-dir", str(work_dir),
           "--d-model", "32", "--n-layers", "1", "--batch-size", "8", "--steps", "6",
           "--save-every", "2", "--threads", "1", "--mix", "short=1,long=1,json=1,infill=1",
           "--edit-share", "0.3", *extra]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)


@pytest.mark.timeout(300)
@pytest.mark.slow
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


def tiny_model(vocab_size=20):
    from dinfer_engine.models.config import LLaDAConfig
    from dinfer_engine.models.llada import LLaDAModelLM

    cfg = LLaDAConfig.from_dict(dict(model_type="llada", d_model=32, n_layers=1, n_heads=2,
                                     vocab_size=vocab_size, mask_token_id=3, eos_token_id=1))
    model = LLaDAModelLM(cfg)
    seen = []
    model.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    return model, seen


def completion_batch():
    from dinfer_training.batches import Batch

    ids = torch.randint(4, 20, (16, 12))
    region = torch.zeros_like(ids, dtype=torch.bool)
    region[:, 5:] = True
    return Batch(ids, region, None, "short")


def test_sft_loss_masks_only_the_answer_and_weights_by_one_over_t():
    from dinfer_training.objective import training_loss

    model, seen = tiny_model()
    batch = completion_batch()
    ids, answer = batch.ids, batch.region
    loss = training_loss(model, batch, 3, 1, torch.Generator().manual_seed(0))
    noisy = seen[0]
    assert torch.equal(noisy[:, :5], ids[:, :5])  # the prompt is never masked
    masked = noisy == 3
    assert masked[:, 5:].any() and torch.equal(noisy[~masked], ids[~masked])
    # recompute by hand: cross-entropy on masked positions, weighted by 1/t
    gen = torch.Generator().manual_seed(0)
    t = (1 - 1e-3) * torch.rand(16, 1, generator=gen) + 1e-3
    logits = model(noisy).logits
    ce = torch.nn.functional.cross_entropy(logits[masked], ids[masked], reduction="none")
    expected = (ce / t.expand_as(ids)[masked]).sum() / answer.sum()
    assert torch.allclose(loss, expected)


def test_editing_rows_corrupt_answer_tokens_and_learn_to_restore_and_keep_them():
    from dinfer_training.objective import KEEP_WEIGHT, training_loss

    model, seen = tiny_model()
    batch = completion_batch()
    ids, region = batch.ids, batch.region
    loss = training_loss(model, batch, 3, 1, torch.Generator().manual_seed(1),
                         edit_share=1.0, max_corrupt=0.6)
    noisy = seen[0]
    assert torch.equal(noisy[:, :5], ids[:, :5])  # the prompt is never masked nor corrupted
    masked = noisy == 3
    corrupted = ~masked & (noisy != ids)
    kept = region & ~masked & ~corrupted
    assert corrupted.sum() > 5 and kept.any() and not (corrupted & ~region).any()
    assert set(noisy[corrupted].tolist()) <= {1, *range(4, 20)}  # EOS or characters
    gen = torch.Generator().manual_seed(1)
    t = (1 - 1e-3) * torch.rand(16, 1, generator=gen) + 1e-3
    weights = (masked / t + corrupted + KEEP_WEIGHT * kept)
    ce = torch.nn.functional.cross_entropy(model(noisy).logits.transpose(1, 2), ids,
                                           reduction="none")
    assert torch.allclose(loss, (ce * weights).sum() / region.sum(), atol=1e-6)


def test_init_from_a_smaller_vocabulary_keeps_its_rows(tmp_path):
    from dinfer_training.train_demo import load_init, model_config

    v2 = tmp_path / "v2"
    train(v2, "--vocab", "v2", "--mix", "short=1", "--steps", "2", "--export",
          str(v2 / "export"))
    vocab = save_char_tokenizer(BASE_CHARS, tmp_path / "tok",
                                appended=CHARS[len(BASE_CHARS):]).get_vocab()
    raw = model_config(len(vocab), 3, 1, 0, 32, 1)
    from dinfer_engine.models.config import LLaDAConfig
    from dinfer_engine.models.llada import LLaDAModelLM

    model = LLaDAModelLM(LLaDAConfig.from_dict(raw))
    load_init(model, v2 / "export", raw, vocab)
    old = load_file(v2 / "export" / "model.safetensors")
    for name in ("model.transformer.wte.weight", "model.transformer.ff_out.weight"):
        grown = model.state_dict()[name]
        assert grown.shape[0] == 100 and torch.equal(grown[:53], old[name].float())
        assert grown[53:].abs().sum() > 0
    with pytest.raises(SystemExit, match="config differs"):
        load_init(model, v2 / "export", {**raw, "d_model": 64}, vocab)
