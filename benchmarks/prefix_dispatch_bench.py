"""What ingest's chunking does for the workers' prompt prefix caches (jobs/intake/prefix_order.py,
docs/adr/028-prefix-cache.md): an OpenAI batch file whose lines interleave `--templates`
instruction prefixes of `--prefix` characters (line i uses template i mod templates), each
followed by a few characters of its own, is ingested into a job (SQLite) with chunks of
`--chunk-size` lines; the job's chunks are then dealt to `--workers` workers in chunk
order (as dispatch hands one job's chunks to free workers), each worker an engine with its
own prefix cache on a random LLaDA2 (a character tokenizer: a character is a token), one
generate call per chunk, after an untimed first call on prompts of its own (a worker runs
many chunks; an engine's first call costs more whatever it holds).

Prints one JSON object: for each source tree given (`--tree NAME=PATH`, e.g. main and
this branch; default: this checkout), the distinct templates per chunk, the prompt tokens
the caches gave back, the prompt tokens computed, the engines' answer tokens per second of
CPU time and wall time; and each tree's ratios to the first tree's. Every tree runs in a
child process of its own (its code first on sys.path).

    python benchmarks/prefix_dispatch_bench.py --tree main=/tmp/base --tree branch=.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "then",
         "some", "more", "words", "follow"]


def template(index: int, chars: int) -> str:
    """An instruction prefix of `chars` characters, different from the first one on."""
    words = [f"rule{index}"] + [WORDS[(index * 7 + i * 3) % len(WORDS)] for i in range(chars)]
    return " ".join(words)[:chars - 1] + " "


def write_file(path: Path, templates: int, lines: int, chars: int) -> Path:
    with path.open("w") as out:
        for i in range(lines):
            body = {"model": "m", "prompt": template(i % templates, chars) + f"item {i}?"}
            out.write(json.dumps({"custom_id": f"r{i}", "method": "POST",
                                  "url": "/v1/completions", "body": body}) + "\n")
    return path


def child(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from baseline import make_job_spec  # same folder: make_spec in the tree that runs
    from sqlalchemy import select

    from dinfer_batch.config import Settings
    from dinfer_batch.jobs.intake.ingest import ingest
    from dinfer_batch.storage import db
    from dinfer_batch.storage.tables import Item
    from dinfer_engine import Engine, GenerationConfig

    torch.set_num_threads(args.threads)
    scratch = Path(args.scratch)
    sessions = db.ready(f"sqlite:///{scratch / f'{args.name}.db'}")
    params = {"max_tokens": args.gen_length, "block_length": args.block_length}
    settings = Settings.from_env(os.environ)
    spec = make_job_spec(str(args.model), params, settings.model_dir, queue="bench",
                         chunk_size=args.chunk_size)
    job = ingest(sessions, scratch / "in.jsonl", spec, settings)
    with sessions() as session:
        rows = session.execute(select(Item.chunk_id, Item.line, Item.request)
                               .where(Item.job_id == job.id).order_by(Item.line)).all()
    chunks: dict[int, list[tuple[int, str]]] = {}
    for chunk, line, request in rows:
        chunks.setdefault(chunk, []).append((line, request["prompt"]))
    config = GenerationConfig(gen_length=args.gen_length, block_length=args.block_length,
                              decoder="fixed", steps=args.steps, early_stop=False,
                              max_batch_size=args.chunk_size, max_batch_tokens=1 << 30)
    engines = [Engine.from_pretrained(args.model, prefix_cache_bytes=args.budget_mb << 20)
               for _ in range(args.workers)]
    length = len(chunks[0][0][1])
    for engine in engines:  # a worker's first call costs more at any shape: not timed
        engine.generate([f"{i} warm up {'9' * length}"[:length] for i in range(args.chunk_size)],
                        config)
    reused = prompt_tokens = answer_tokens = 0
    wall = cpu = 0.0
    for index, chunk in enumerate(sorted(chunks)):
        engine = engines[index % args.workers]
        start, cpu_start = time.perf_counter(), time.process_time()
        results = engine.generate([prompt for _, prompt in chunks[chunk]], config)
        wall += time.perf_counter() - start
        cpu += time.process_time() - cpu_start
        reused += sum(r.prefix_tokens_reused or 0 for r in results)
        prompt_tokens += sum(r.prompt_tokens for r in results)
        answer_tokens += sum(r.completion_tokens for r in results)
    kinds = [len({(line - 1) % args.templates for line, _ in chunks[c]}) for c in chunks]
    return {"chunks": len(chunks), "templates_per_chunk": sum(kinds) / len(kinds),
            "prefix_tokens_reused": reused, "prompt_tokens_computed": prompt_tokens - reused,
            "tokens_per_s": round(answer_tokens / wall, 1),
            "tokens_per_cpu_s": round(answer_tokens / cpu, 1), "seconds": round(wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[],
                        help="NAME=PATH of a source tree to run (repeatable)")
    parser.add_argument("--templates", type=int, default=8)
    parser.add_argument("--lines", type=int, default=64)
    parser.add_argument("--prefix", type=int, default=512, help="characters (= tokens)")
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--gen-length", type=int, default=32)
    parser.add_argument("--block-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=4, help="forwards per answer")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--budget-mb", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    trees = [tree.split("=", 1) for tree in args.tree] or [["this", str(REPO)]]
    with tempfile.TemporaryDirectory() as scratch:
        sys.path.insert(0, str(REPO))
        from benchmarks.prefix_cache_bench import write_model

        model = write_model(Path(scratch) / "llada2", args.hidden, args.layers)
        write_file(Path(scratch) / "in.jsonl", args.templates, args.lines, args.prefix)
        runs = {}
        for name, path in trees:
            command = [sys.executable, __file__, "--child", "--name", name, "--scratch",
                       scratch, "--model", str(model)]
            for option in ("templates", "chunk_size", "workers", "gen_length",
                           "block_length", "steps", "budget_mb", "threads"):
                command += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
            env = {"PYTHONPATH": str(Path(path).resolve())}
            runs[name] = json.loads(subprocess.run(
                command, check=True, stdout=subprocess.PIPE, text=True,
                env={**os.environ, **env}).stdout)
    first = runs[trees[0][0]]
    print(json.dumps({
        "setup": {name: getattr(args, name) for name in (
            "templates", "lines", "prefix", "chunk_size", "workers", "gen_length",
            "block_length", "steps", "hidden", "layers", "threads")},
        "runs": runs,
        "ratios_to_" + trees[0][0]: {name: {
            "prefix_tokens_reused": round(run["prefix_tokens_reused"]
                                          / max(first["prefix_tokens_reused"], 1), 2),
            "prompt_tokens_computed": round(run["prompt_tokens_computed"]
                                            / first["prompt_tokens_computed"], 3),
            "tokens_per_s": round(run["tokens_per_s"] / first["tokens_per_s"], 2),
            "tokens_per_cpu_s": round(run["tokens_per_cpu_s"] / first["tokens_per_cpu_s"], 2)}
            for name, run in runs.items()}}, indent=1))


if __name__ == "__main__":
    main()
