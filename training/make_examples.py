"""Write examples/prompts.jsonl (plain lines) and examples/prompts_openai.jsonl (the same
requests as OpenAI batch lines) from held-out demo prompts, so their answers are checkable.

    python -m training.make_examples --per-task 75 --out examples
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from training.tasks import SHORT_TASKS, eval_set


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--per-task", type=int, default=75)
    ap.add_argument("--out", type=Path, default=Path("examples"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    short = eval_set(args.per_task, SHORT_TASKS)
    by_task = [short[i::args.per_task] for i in range(args.per_task)]
    examples = [ex for group in by_task for ex in group]  # tasks interleaved
    with (args.out / "prompts.jsonl").open("w") as plain, \
            (args.out / "prompts_openai.jsonl").open("w") as openai:
        for i, ex in enumerate(examples):
            custom_id = f"{ex.task}-{i:04d}"
            plain.write(json.dumps({"custom_id": custom_id, "prompt": ex.prompt}) + "\n")
            openai.write(json.dumps({
                "custom_id": custom_id, "method": "POST", "url": "/v1/completions",
                "body": {"model": "demo", "prompt": ex.prompt, "max_tokens": 24},
            }) + "\n")
    print(f"wrote {len(examples)} requests to {args.out}/prompts.jsonl and prompts_openai.jsonl")


if __name__ == "__main__":
    main()
