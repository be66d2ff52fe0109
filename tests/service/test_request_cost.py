"""A request's cost in generations (formats/lines/cost.py): n x its infill rows' canvases x the
editing decoder's post-step factor, as line_check computes it from the resolved
configuration, and a line over its owner's largest chunk failing alone, naming it."""

import json

import pytest

from dinfer_batch.formats.lines.cost import request_cost
from dinfer_batch.formats.lines.requests import parse_line
from dinfer_batch.jobs.intake.line_check import LineChecker, TextBatch
from dinfer_batch.jobs.spec import JobSpec
from dinfer_batch.model_info import load_model_info
from dinfer_models import MODELS_DIR

COMMON = {"max_tokens": 16, "block_length": 8}


def cost(model, line, **job_params):
    request = parse_line(json.dumps(line), 1).request
    assert request is not None
    params = job_params | request["params"]
    return request_cost(request, params, model.config(params))


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_model_info(str(tiny_checkpoint), MODELS_DIR)


@pytest.mark.parametrize(("line", "expected"), [
    ({"prompt": "a"}, 1),
    ({"prompt": "a", "n": 4}, 4),
    ({"prompt": "a", "suffix": "b"}, 1),  # one gap of max_tokens: an ordinary canvas
    ({"prompt": "a", "suffix": "b", "n": 3}, 3),
    ({"prompt": "a", "suffix": "b", "infill_lengths": list(range(1, 17))}, 16),
    ({"prompt": "a", "suffix": "b", "infill_lengths": [4, 8], "n": 5}, 10),
    ({"prompt": "a", "suffix": "b", "infill_lengths": "auto"}, 2),  # 16 and 8
    ({"prompt": "a", "suffix": "b", "infill_lengths": [40]}, 3),  # a canvas of 2.5 answers
    ({"prompt": "a", "suffix": ["b", "c", "d"]}, 3),  # three gaps of max_tokens
    ({"prompt": "a", "suffix": ["b", "c"], "spans": [20, 20]}, 3),
    ({"prompt": "a", "suffix": ["b", "c"], "spans": [1, 1]}, 1),
    # the editing decoder: 1 + max_post_steps over its mask forwards per block
    ({"prompt": "a", "decoder": "editing", "max_post_steps": 0}, 1),
    ({"prompt": "a", "decoder": "editing", "max_post_steps": 16}, 3),  # 1 + 16 / 8
    ({"prompt": "a", "decoder": "editing", "max_post_steps": 4}, 2),  # rounded up
    ({"prompt": "a", "decoder": "editing", "max_post_steps": 16, "num_to_transfer": 4}, 9),
    ({"prompt": "a", "decoder": "editing", "max_post_steps": 256, "block_length": 1,
      "editing_threshold": 0}, 257),
    ({"prompt": "a", "decoder": "editing", "max_post_steps": 16, "n": 2}, 6),
    ({"prompt": "a", "preset": "speed"}, 3),  # the preset's 16 post-steps
])
def test_cost_counts_samples_candidates_canvas_and_post_steps(model, line, expected):
    assert cost(model, COMMON | line) == expected


def test_the_jobs_parameters_count_under_the_lines(model):
    line = {"prompt": "a", "suffix": "b"} | COMMON
    assert cost(model, line, infill_lengths=[2, 4, 8], n=2) == 6
    assert cost(model, line | {"n": 1}, infill_lengths=[2, 4, 8], n=2) == 3
    plain = {"prompt": "a"} | COMMON
    assert cost(model, plain, decoder="editing", max_post_steps=8) == 2


def check(model, lines, max_line_cost=None):
    checker = LineChecker(JobSpec(model=model, queue="q", chunk_size=256),
                          max_line_cost=max_line_cost)
    return checker(TextBatch(1, [json.dumps(line) for line in lines]))


def test_line_check_carries_each_lines_cost_and_fails_one_above_the_largest_chunk(model):
    lines = [{"prompt": "a"} | COMMON,
             {"prompt": "a", "suffix": "b", "infill_lengths": list(range(1, 17))} | COMMON,
             {"prompt": "a", "suffix": "b", "infill_lengths": list(range(1, 17)),
              "n": 2} | COMMON,
             {"prompt": "a", "decoder": "editing", "max_post_steps": 256, "n": 1} | COMMON]
    assert [line.cost for line in check(model, lines)] == [1, 16, 32, 33]
    checked = check(model, lines, max_line_cost=32)
    assert [line.error is None for line in checked] == [True, True, True, False]
    assert checked[3].error == (
        "line 4: this request costs 33 generations (n x infill candidates x the editing "
        "decoder's post-steps, docs/service.md), above this key's max_chunk_size of 32; "
        "ask for fewer samples, candidates or post-steps")


def test_metrics_show_the_lines_cost_and_each_samples_share():
    from dinfer_batch.formats.results.output import ItemRow, JobFields, lines

    job = JobFields("batch_x", "m", "completed", {}, 0, 1.0)
    request = parse_line(json.dumps({"prompt": "a", "n": 2}), 1).request
    samples = [{"text": t, "finish_reason": "stop", "completion_tokens": 1, "nfe": 3,
                "latency_s": 0.1} for t in ("x", "y")]
    row = ItemRow(1, "c", "completed", None, None, request, "x", samples, "stop", 1, 2, 6,
                  0.1, 2.0, None, None, None, 6)
    [whole] = lines(job, [row], per_sample=False)
    assert whole["response"]["body"]["metrics"]["cost"] == 6
    assert [line["response"]["body"]["metrics"]["cost"]
            for line in lines(job, [row], per_sample=True)] == [3, 3]
    [old] = lines(job, [row._replace(cost=None)], per_sample=False)  # before migration 0016
    assert "cost" not in old["response"]["body"]["metrics"]
