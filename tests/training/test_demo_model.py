"""The shipped demo model (dinfer_models/demo): it loads through the real checkpoint path and
gives exact, checked greedy answers; threshold decoding needs fewer forwards."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dinfer_engine import Engine, GenerationConfig
from dinfer_training.tasks import eval_set, held_out

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "dinfer_models" / "demo"

# held-out prompts the shipped model answers correctly under both decoders
PINNED = [
    ('add 989 796=', '1785'),
    ('add 451 119=', '570'),
    ('add 932 965=', '1897'),
    ('sort 72031=', '01237'),
    ('sort 1163898=', '1136889'),
    ('sort 826582=', '225688'),
    ('rev vzw=', 'wzv'),
    ('rev kjvzq=', 'qzvjk'),
    ('rev gkan=', 'nakg'),
    ('def item(gd, ny):', ' return gd[ny]'),
    ('def check_even(vq):', ' return vq % 2 == 0'),
    ('def even(ue):', ' return ue % 2 == 0'),
    ('add 49 97=', '146'),  # small operands: drawn as often as large ones in training
    ('add 53 5=', '58'),
]
# held-out `count` prompts: answers over several 8-token blocks (answer length 64)
PINNED_LONG = [
    ('count 654 668=', '654 655 656 657 658 659 660 661 662 663 664 665 666 667 668'),
    ('count 690 704=', '690 691 692 693 694 695 696 697 698 699 700 701 702 703 704'),
]
# held-out JSON prompts (answer length 48)
PINNED_JSON = [
    ('json sort 190468=', '{"sorted": [0, 1, 4, 6, 8, 9], "length": 6}'),
    ('json sort 0596=', '{"sorted": [0, 5, 6, 9], "length": 4}'),
    ('json rev docwuug=', '{"word": "docwuug", "reversed": "guuwcod"}'),
    ('json rev gkan=', '{"word": "gkan", "reversed": "nakg"}'),
]
# held-out infill examples (prompt, suffix, span, middle), decoded in the engine's canvas
PINNED_INFILL = [
    ('def product(oph, ju):', 'u', 18, ' return oph * j'),
    ('def smaller(re, agk):\n    if re < agk:\n        return re\n ', 'agk', 11, '   return '),
    ('json rev lxldxcwo={"word": "lxldxcwo", "reversed": "', 'dlxl"}', 4, 'owcx'),
    ('def times(kt, msq):\n ', 't * msq', 11, '   return k'),
]


@pytest.fixture(scope="module")
def demo() -> Engine:
    return Engine.from_pretrained(DEMO)


def test_unset_fields_take_the_models_generation_config(demo):
    config = demo.resolve_config()
    saved = json.loads((DEMO / "generation_config.json").read_text())
    assert (config.gen_length, config.block_length, config.steps) == (
        saved["gen_length"], saved["block_length"], saved["steps"])
    assert demo.mask_id == saved["mask_token_id"] and demo.eos_id == saved["eos_token_id"]


@pytest.mark.parametrize("config", [
    GenerationConfig(decoder="fixed", steps=24),
    GenerationConfig(decoder="threshold", threshold=0.9),
    GenerationConfig(decoder="threshold", threshold=0.9, cache="dual"),
], ids=["fixed", "threshold", "threshold-dual"])
def test_pinned_greedy_answers(demo, config):
    results = demo.generate([p for p, _ in PINNED], config)
    assert [r.text for r in results] == [a for _, a in PINNED]
    assert all(r.finish_reason == "stop" for r in results)
    assert [r.token_ids for r in results] == [demo.tokenizer(a)["input_ids"] for _, a in PINNED]


@pytest.mark.parametrize("config", [
    GenerationConfig(gen_length=64, decoder="threshold", threshold=0.9),
    GenerationConfig(gen_length=64, decoder="hierarchical", cache="dual"),
    GenerationConfig(gen_length=64, decoder="credit", cache="vicinity", prefix_look=8,
                     after_look=8),
], ids=["threshold", "hierarchical-dual", "credit-vicinity"])
def test_pinned_long_answers(demo, config):
    results = demo.generate([p for p, _ in PINNED_LONG], config)
    assert [r.text for r in results] == [a for _, a in PINNED_LONG]
    assert all(r.nfe > 1 for r in results)  # several blocks


@pytest.mark.parametrize("config", [
    GenerationConfig(gen_length=48, decoder="threshold", threshold=0.9),
    GenerationConfig(gen_length=48, decoder="fixed", steps=48),
], ids=["threshold", "fixed"])
def test_pinned_json_answers(demo, config):
    results = demo.generate([p for p, _ in PINNED_JSON], config)
    assert [r.text for r in results] == [a for _, a in PINNED_JSON]
    assert all(json.loads(r.text) for r in results)


def test_pinned_infill_middles(demo):
    from dinfer_training.example import Example
    from dinfer_training.model_checks import Special, decode_infill

    vocab = demo.tokenizer.get_vocab()
    special = Special(pad=demo.tokenizer.pad_token_id, eos=demo.eos_id, mask=demo.mask_id,
                      vocab_size=len(vocab))
    examples = [Example("infill", p, m, suffix=s, span=n) for p, s, n, m in PINNED_INFILL]
    held = {(ex.prompt, ex.suffix, ex.span, ex.answer) for ex in held_out()["infill"]}
    assert set(PINNED_INFILL) <= held
    spans = decode_infill(demo.model, lambda text: [vocab[c] for c in text], special, examples)
    for ex, (span, _) in zip(examples, spans, strict=True):
        middle = span[:span.index(demo.eos_id)] if demo.eos_id in span else span
        assert demo.tokenizer.decode(middle) == ex.answer


def test_the_vocabulary_grew_keeping_the_earlier_ids(demo):
    vocab = demo.tokenizer.get_vocab()
    assert len(vocab) == 100 and vocab["a"] == 27 and vocab["_"] == 26 and vocab["{"] == 79
    assert [vocab[t] for t in ("<|pad|>", "<|eos|>", "<|unk|>", "<|mask|>")] == [0, 1, 2, 3]


def test_threshold_decoding_takes_fewer_forwards_than_one_token_per_step(demo):
    prompts = [p for p, _ in PINNED]
    fixed = demo.generate(prompts, GenerationConfig(decoder="fixed", steps=24))
    threshold = demo.generate(prompts, GenerationConfig(decoder="threshold", threshold=0.9))
    assert all(t.nfe < f.nfe for t, f in zip(threshold, fixed, strict=True))


def test_example_files_are_the_generated_held_out_requests(tmp_path):
    subprocess.run([sys.executable, "-m", "dinfer_training.make_examples", "--out", str(tmp_path)],
                   check=True, capture_output=True, cwd=ROOT)
    for name in ("prompts.jsonl", "prompts_openai.jsonl", "structured_synthesis.jsonl",
                 "infill.jsonl"):
        assert (tmp_path / name).read_text() == (ROOT / "examples" / name).read_text()
    held_out = {ex.prompt for ex in eval_set(500)}
    lines = (ROOT / "examples" / "prompts.jsonl").read_text().splitlines()
    assert all(json.loads(line)["prompt"] in held_out for line in lines)


def read_lines(name):
    return [json.loads(line) for line in (ROOT / "examples" / name).read_text().splitlines()]


def test_structured_and_infill_examples_use_openais_fields_and_are_checkable(tmp_path):
    """OpenAI batch lines: `response_format` json_schema {name, schema, strict} and
    completions' `suffix`; `make_examples --check` scores a results file of them."""
    from dinfer_training.json_tasks import JSON_SCHEMAS

    structured, infill = read_lines("structured_synthesis.jsonl"), read_lines("infill.jsonl")
    for line in structured + infill:
        assert set(line) == {"custom_id", "method", "url", "body"}
        assert line["url"] == "/v1/completions" and line["body"]["model"] == "demo"
    for line in structured:
        fmt = line["body"]["response_format"]
        assert fmt["type"] == "json_schema" and set(fmt["json_schema"]) == {"name", "schema",
                                                                            "strict"}
        assert fmt["json_schema"]["schema"] == JSON_SCHEMAS[fmt["json_schema"]["name"]]
    assert all(isinstance(line["body"]["suffix"], str) for line in infill)
    held = {(ex.prompt, ex.suffix, ex.span): ex for ex in eval_set(500, ("infill",))}
    answers = [held[(b["prompt"], b["suffix"], b["max_tokens"])].answer
               for b in (line["body"] for line in infill)]
    results = tmp_path / "results.jsonl"
    with results.open("w") as f:  # right answers, then one wrong, in the batch output shape
        for line, text in zip(structured + infill, [None] * len(structured) + answers,
                              strict=True):
            if text is None:
                text = held_answer(line["body"]["prompt"])
            if line["custom_id"] == "infill-0001":
                text += "x"
            body = {"choices": [{"index": 0, "text": text}]}
            f.write(json.dumps({"custom_id": line["custom_id"],
                                "response": {"status_code": 200, "body": body}}) + "\n")
    report = subprocess.run([sys.executable, "-m", "dinfer_training.make_examples", "--check",
                             str(results)], check=True, capture_output=True, text=True, cwd=ROOT)
    scores = json.loads(report.stdout)
    assert scores["json_add"] == {"lines": 30, "exact": 1.0, "content": 1.0}
    assert scores["infill"] == {"lines": 60, "exact": round(59 / 60, 4)}


def held_answer(prompt):
    (ex,) = [ex for ex in eval_set(500) if ex.prompt == prompt and not ex.suffix]
    return ex.answer


@pytest.mark.slow
def test_structured_and_infill_examples_run_as_written_with_the_bundled_model(tmp_path):
    """`dinfer-batch run` takes every line of both example files (no line refused), and
    the shipped model's answers score as its card says (greedy, so exactly)."""
    env = {**os.environ, "DINFER_BATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}"}
    outputs = []
    for name in ("structured_synthesis.jsonl", "infill.jsonl"):
        out = tmp_path / name
        subprocess.run([sys.executable, "-m", "dinfer_batch", "run", str(ROOT / "examples" / name),
                        "-o", str(out)], check=True, capture_output=True, cwd=ROOT, env=env)
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert [line["error"] for line in lines] == [None] * len(read_lines(name))
        outputs.append(out.read_text())
    results = tmp_path / "results.jsonl"
    results.write_text("".join(outputs))
    report = subprocess.run([sys.executable, "-m", "dinfer_training.make_examples", "--check",
                             str(results)], check=True, capture_output=True, text=True, cwd=ROOT)
    scores = json.loads(report.stdout)
    assert scores["json_rev"]["content"] > 0.9 and scores["json_sort"]["content"] > 0.9
    assert scores["infill"]["exact"] > 0.3
