"""benchmarks/engine_bench.py at several tensor-parallel sizes on random checkpoints of
each family, side by side in one run: per size, each rank's parameter bytes and peak
memory, output tokens/s per batch size, and its ratio to one rank. Prints one JSON object.

    python benchmarks/tp_bench.py --device cpu                   # ~100M models, TP 1 and 2
    python benchmarks/tp_bench.py --device cuda --shape real --sizes 1,2,8

--shape real writes the published models' widths with --layers layers (see
random_checkpoint.py); on CUDA, rank r runs on GPU r. On a CPU every rank is one process
with --threads threads, so TP 2 also uses twice the cores of TP 1: the ratio there says
what splitting costs or gains on that machine, not what GPUs would show.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ("llada", "llada_moe", "llada2")


def run_json(command: list[str]) -> dict[str, Any]:
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode:
        return {"exit_code": done.returncode, "error": done.stderr[-2000:]}
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shape", choices=("100m", "real"), default="100m")
    parser.add_argument("--layers", default="2", help="with --shape real")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--sizes", default="1,2", help="tensor-parallel sizes")
    parser.add_argument("--batch-sizes", default="1,4")
    parser.add_argument("--gen-length", default="32")
    parser.add_argument("--threads", default="1")
    args = parser.parse_args()
    python = sys.executable
    report: dict[str, Any] = {"device": args.device, "shape": args.shape, "families": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for family in args.families.split(","):
            model = Path(scratch) / family
            subprocess.run([python, "benchmarks/random_checkpoint.py", family, str(model),
                            "--shape", args.shape, "--layers", args.layers], check=True,
                           cwd=REPO, stdout=subprocess.DEVNULL)
            sizes: dict[str, Any] = {}
            for size in args.sizes.split(","):
                bench = run_json([
                    python, "benchmarks/engine_bench.py", "--model", str(model), "--device",
                    args.device, "--tensor-parallel", size, "--batch-sizes", args.batch_sizes,
                    "--decoders", "threshold", "--caches", "dual", "--gen-length",
                    args.gen_length, "--block-length", args.gen_length, "--threads",
                    args.threads])
                if "runs" not in bench:
                    sizes[size] = bench
                    continue
                sizes[size] = {
                    "rank_parameter_bytes": bench["rank_parameter_bytes"],
                    "rank_peak_memory_mb": bench["rank_peak_memory_mb"],
                    "tokens_per_s": {str(r["batch_size"]): r["output_tokens_per_s"]
                                     for r in bench["runs"]}}
            one = sizes.get("1", {}).get("tokens_per_s", {})
            for figures in sizes.values():
                if one and "tokens_per_s" in figures:
                    figures["ratio_to_1"] = {b: round(v / one[b], 2) for b, v in
                                             figures["tokens_per_s"].items() if one.get(b)}
            report["families"][family] = sizes
            shutil.rmtree(model, ignore_errors=True)  # real shapes take GBs of disk
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
