"""The sampling controls through the service (`dinfer-batch run`, SQLite, the tiny LLaDA
checkpoint): each line's answer is the engine's for that line's controls alone, lines
with different controls run in one job, and what cannot be honoured fails its line by
name (docs/adr/060-sampling-controls.md)."""

from __future__ import annotations

from dinfer_engine import Engine, GenerationConfig
from tests.service_helpers import read_jsonl, write_jsonl

CONTROLS = [
    {},
    {"logit_bias": {"1": 12, "6": 10}, "min_tokens": 6},
    {"logit_bias": {"1": 12}, "ignore_eos": True},
    {"presence_penalty": 1.5, "frequency_penalty": 0.5},
    {"repetition_penalty": 1.8, "min_p": 0.1},
]


def test_each_line_gets_its_own_controls(sqlite_service, tmp_path, tiny_checkpoint):
    lines = [{"custom_id": f"c{i}", "prompt": "add 1 2=", **controls}
             for i, controls in enumerate(CONTROLS)]
    lines += [{"custom_id": "outside", "prompt": "a", "logit_bias": {"45": 1}},
              {"custom_id": "json", "prompt": "a", "ignore_eos": True,
               "response_format": {"type": "json_object"}}]
    out, errors = tmp_path / "out.jsonl", tmp_path / "errors.jsonl"
    result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", lines), "-o", out,
                                "--errors", errors, "--model", tiny_checkpoint,
                                "--max-tokens", "16", "--block-length", "8")
    assert result.exit_code == 0, result.output
    engine = Engine.from_pretrained(tiny_checkpoint)
    answers = {line["custom_id"]: line["response"]["body"]["choices"][0]["text"]
               for line in read_jsonl(out)}
    for i, controls in enumerate(CONTROLS):
        alone = engine.generate(["add 1 2="], GenerationConfig(
            gen_length=16, block_length=8, **controls))[0]
        assert answers[f"c{i}"] == alone.text, controls
    assert len(set(answers.values())) > 2  # the controls changed answers
    failed = {line["custom_id"]: line["error"]["message"] for line in read_jsonl(errors)}
    assert failed == {
        "outside": "line 6: logit_bias names token 45, outside the model's vocabulary of 45 "
                   "tokens (ids 0 to 44)",
        "json": "line 7: structured outputs cannot use ignore_eos or min_tokens: a "
                "constrained answer ends with a stop token where its grammar ends"}
