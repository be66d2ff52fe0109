"""How much memory a tensor-parallel rank grows by, against one rank, loading the same
checkpoint and running the same generate: each rank's peak memory (CUDA: peak allocated;
CPU: peak RSS) on a random ~100M checkpoint (benchmarks/random_checkpoint.py) less its
peak on a tiny checkpoint of the same family (the process itself, its imports and
runtime), at 1 and 2 ranks, per source tree side by side in one run (`--tree NAME=PATH`,
e.g. main and this branch; default: this checkout). Prints one JSON object whose
`largest_rank_ratio` is the largest rank's growth at 2 ranks over the growth at 1 (ideal:
0.5 of the weights plus what every rank replicates).

    python benchmarks/tp_memory_bench.py --tree main=/tmp/base --tree branch=.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def child(args: argparse.Namespace) -> list[float]:
    """Each rank's peak memory (MB) after loading `args.model` and one generate."""
    import torch

    from dinfer_engine import Engine, GenerationConfig

    torch.set_num_threads(1)
    with Engine.from_pretrained(args.model, device=args.device,
                                tensor_parallel=args.size) as engine:
        config = GenerationConfig(gen_length=32, block_length=32, steps=8, early_stop=False,
                                  max_batch_size=args.batch_size)
        engine.generate([f"prompt {i} " * 16 for i in range(args.batch_size)], config)
        return [round(m, 1) for m in engine.peak_memory_mb()]


def peaks(args: argparse.Namespace, tree: str, model: Path, size: int) -> list[float]:
    command = [sys.executable, __file__, "--child", "--model", str(model), "--size", str(size),
               "--device", args.device, "--batch-size", str(args.batch_size)]
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(tree).resolve())}).stdout
    result: list[float] = json.loads(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[],
                        help="NAME=PATH of a source tree to run (repeatable)")
    parser.add_argument("--family", default="llada2", choices=("llada", "llada_moe", "llada2"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    trees = [tree.split("=", 1) for tree in args.tree] or [["this", str(REPO)]]
    report: dict[str, Any] = {"family": args.family, "device": args.device, "trees": {}}
    with tempfile.TemporaryDirectory() as scratch:
        model, tiny = Path(scratch) / "model", Path(scratch) / "tiny"
        subprocess.run([sys.executable, str(REPO / "benchmarks/random_checkpoint.py"),
                        args.family, str(model)], check=True, stdout=subprocess.DEVNULL)
        sys.path.insert(0, str(REPO))
        from tests.tiny_model import write_tiny_checkpoint
        from tests.tiny_moe import write_tiny_moe

        if args.family == "llada":
            write_tiny_checkpoint(tiny, embedding_size=64)
        else:
            write_tiny_moe(tiny, args.family, vocab_size=64)
        for name, path in trees:
            sizes = {}
            for size in (1, 2):
                full, empty = peaks(args, path, model, size), peaks(args, path, tiny, size)
                sizes[str(size)] = {"peak_mb": full, "peak_on_tiny_mb": empty,
                                    "grown_mb": [round(f - e, 1) for f, e in
                                                 zip(full, empty, strict=True)]}
            one = sizes["1"]["grown_mb"][0]
            report["trees"][name] = {"sizes": sizes, "largest_rank_ratio": round(
                max(sizes["2"]["grown_mb"]) / one, 3)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
