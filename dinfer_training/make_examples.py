"""Write the example request files from held-out demo prompts, so their answers are
checkable, and check a results file against them.

- examples/prompts.jsonl (plain lines) and examples/prompts_openai.jsonl (the same
  requests as OpenAI batch lines): the four short tasks;
- examples/structured_synthesis.jsonl: the JSON tasks as OpenAI completions batch lines
  asking for their JSON Schema with `response_format` (docs/structured-outputs.md);
- examples/infill.jsonl: infill examples as OpenAI completions batch lines with
  `suffix`, `max_tokens` the span and `block_length` too: the gap is one block, decoded
  whole as the model was trained (and block_length must divide max_tokens; docs/infill.md).

    python -m dinfer_training.make_examples --per-task 75 --out examples
    python -m dinfer_training.make_examples --check results.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

from dinfer_training.example import Example
from dinfer_training.json_tasks import JSON_SCHEMAS, JSON_TASKS, same_content
from dinfer_training.tasks import ANSWER_REGION, SHORT_TASKS, eval_set, held_out

STRUCTURED_PER_TASK = 30
INFILL_LINES = 60


def interleaved(per_task: int, tasks: tuple[str, ...]) -> list[Example]:
    examples = eval_set(per_task, tasks)
    return [ex for i in range(per_task) for ex in examples[i::per_task]]


def prompt_lines(per_task: int) -> Iterator[tuple[str, Example]]:
    for i, ex in enumerate(interleaved(per_task, SHORT_TASKS)):
        yield f"{ex.task}-{i:04d}", ex


def structured_lines() -> Iterator[tuple[str, Example]]:
    for i, ex in enumerate(interleaved(STRUCTURED_PER_TASK, JSON_TASKS)):
        yield f"{ex.task}-{i:04d}", ex


def infill_lines() -> Iterator[tuple[str, Example]]:
    for i, ex in enumerate(held_out()["infill"][:INFILL_LINES]):
        yield f"infill-{i:04d}", ex


def completion(body: dict, custom_id: str) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/completions",
                       "body": {"model": "demo", **body}})


def write(out: Path, per_task: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "prompts.jsonl").open("w") as plain, \
            (out / "prompts_openai.jsonl").open("w") as openai:
        for custom_id, ex in prompt_lines(per_task):
            plain.write(json.dumps({"custom_id": custom_id, "prompt": ex.prompt}) + "\n")
            openai.write(completion({"prompt": ex.prompt, "max_tokens": 24}, custom_id) + "\n")
    with (out / "structured_synthesis.jsonl").open("w") as f:
        for custom_id, ex in structured_lines():
            schema = {"name": ex.task, "schema": JSON_SCHEMAS[ex.task], "strict": True}
            f.write(completion({"prompt": ex.prompt, "max_tokens": ANSWER_REGION[ex.task],
                                "response_format": {"type": "json_schema",
                                                    "json_schema": schema}}, custom_id) + "\n")
    with (out / "infill.jsonl").open("w") as f:
        for custom_id, ex in infill_lines():
            f.write(completion({"prompt": ex.prompt, "suffix": ex.suffix,
                                "max_tokens": ex.span, "block_length": ex.span},
                               custom_id) + "\n")
    print(f"wrote prompts.jsonl, prompts_openai.jsonl, structured_synthesis.jsonl and "
          f"infill.jsonl to {out}")


def output_text(line: dict) -> str | None:
    """The first choice's text of an output line (OpenAI batch output or native)."""
    body = (line.get("response") or {}).get("body") or line
    choices = body.get("choices") or [{}]
    return choices[0].get("text", choices[0].get("message", {}).get("content"))


def check(results: Path, per_task: int) -> dict[str, object]:
    """Exact match per task of a results file of any of the example files; for JSON
    tasks also content accuracy (the parsed value equals the reference)."""
    expected = dict([*prompt_lines(per_task), *structured_lines(), *infill_lines()])
    tally: dict[str, list[int]] = {}
    for raw in results.read_text().splitlines():
        line = json.loads(raw)
        ex = expected.get(line.get("custom_id", ""))
        if ex is None:
            continue
        text = output_text(line) or ""
        row = tally.setdefault(ex.task, [0, 0, 0])
        row[0] += 1
        row[1] += text == ex.answer
        row[2] += ex.task in JSON_SCHEMAS and same_content(ex, text)
    return {task: {"lines": n, "exact": round(hit / n, 4),
                   **({"content": round(content / n, 4)} if task in JSON_SCHEMAS else {})}
            for task, (n, hit, content) in sorted(tally.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--per-task", type=int, default=75)
    ap.add_argument("--out", type=Path, default=Path("examples"))
    ap.add_argument("--check", type=Path, metavar="RESULTS",
                    help="score a results file of these examples instead of writing them")
    args = ap.parse_args()
    if args.check:
        print(json.dumps(check(args.check, args.per_task), indent=2))
    else:
        write(args.out, args.per_task)


if __name__ == "__main__":
    main()
