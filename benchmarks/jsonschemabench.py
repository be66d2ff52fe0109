"""JSONSchemaBench (benchmarks/data/jsonschemabench/, 20 real schemas per dataset): what
share of each dataset this engine accepts (dinfer_engine/constraints/schema.py's check, every
keyword enforced exactly or refused), and how long a schema's grammar takes over a random
checkpoint's 126,464-token vocabulary (LLaDA's size; benchmarks/structured_bench.py's
synthetic BPE vocabulary), side by side in one run with raw llguidance (the schema as
given) and raw xgrammar (if installed: `pip install -e .[bench]`; it approximates some
keywords, so its acceptance is not exactness).

Compile time is from the schema to the first token mask (grammar, matcher, first mask),
with the vocabulary's own preprocessing done once beforehand (per model per process).

    python benchmarks/jsonschemabench.py
    python benchmarks/jsonschemabench.py --generate --per-dataset 10

--generate also asks the engine for one constrained answer per accepted schema, all
of a dataset's in one batch (rows are independent: the same answers as one at a time),
on a random checkpoint of the same kind with a --generate-vocab-token vocabulary
(default 4,096: the specials, every printable ASCII character, random 2-8 character
pieces; 126,464 gives the compile figures' vocabulary, where each replaced proposal's
token mask and scores over the whole vocabulary make a dataset take minutes), and
reports per dataset the share of answers that end "stop" and the share of those that
jsonschema validates (with the schema's draft's format checker), with any invalid
answer's start, and how many "length" answers had no valid answer within the canvas
from their start (as far as the engine's search finds). The canvas is --gen-length
answer tokens (default 128, blocks of 32, two tokens per step, threshold decoder,
greedy): a schema whose shortest valid answer is longer ends "length". It also reports
the peak memory of the constrained batch and tokens/s per generated token constrained
and unconstrained (benchmarks/jsonschemabench_generate.py). With --per-dataset 10 the
run takes about 5 minutes on a loaded 2-core machine. Prints one JSON object.

    python benchmarks/jsonschemabench.py --generate --generate-vocab 126464 \
        --tree main=/tmp/main --tree branch=. --per-dataset 4

--tree NAME=PATH (repeatable) measures only --generate's figures, for each source tree
in its own process over one checkpoint, one tree after the other; with --batch N, in one
batch of N schemas, the datasets' in turn (the first --per-dataset of each)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # benchmarks.*, tests.* when run as a script

import llguidance  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from benchmarks.jsonschemabench_generate import generated  # noqa: E402
from dinfer_engine.constraints.schema import check_schema, prepare_schema  # noqa: E402
from dinfer_engine.constraints.spec_errors import ConstraintError  # noqa: E402
from dinfer_engine.constraints.vocabulary import token_bytes  # noqa: E402
from tests.json_models import LLADA_VOCAB, big_vocab_checkpoint  # noqa: E402

DATA = REPO / "benchmarks" / "data" / "jsonschemabench"
JSON_OPTIONS = {"whitespace_flexible": False}


class _Vocabulary:
    """What llguidance.TokenizerWrapper reads: each token's bytes (special tokens
    spell their names and are listed as special), the stop token, an encoder."""

    def __init__(self, hf_tokenizer: Any) -> None:
        spelled = token_bytes(hf_tokenizer)
        names = {i: t for t, i in hf_tokenizer.get_vocab().items()}
        self.tokens = [spelled.get(i, names.get(i, "").encode()) for i in range(LLADA_VOCAB)]
        self.special_token_ids = sorted(set(range(LLADA_VOCAB)) - set(spelled))
        self.eos_token_id, self.bos_token_id = hf_tokenizer.eos_token_id, None
        self.encode = hf_tokenizer.encode

    def __call__(self, text: str | bytes) -> list[int]:
        return list(self.encode(text if isinstance(text, str) else text.decode(),
                                add_special_tokens=False))


def load(per_dataset: int) -> dict[str, list[dict[str, Any]]]:
    return {path.stem: [json.loads(line) for line in path.read_text().splitlines()][
        :per_dataset] for path in sorted(DATA.glob("*.jsonl"))}


def llguidance_ms(tokenizer: llguidance.LLTokenizer, schema: dict[str, Any]) -> float | None:
    """Schema -> first mask with llguidance, in ms; None if it cannot build."""
    start = time.perf_counter()
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
    except ValueError:
        return None
    matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
    if matcher.is_error():
        return None
    matcher.compute_bitmask()
    return (time.perf_counter() - start) * 1000


def ours_ms(tokenizer: llguidance.LLTokenizer, schema: dict[str, Any]) -> float | None:
    start = time.perf_counter()
    try:
        prepared = prepare_schema(schema)
    except ConstraintError:
        return None
    built = llguidance_ms(tokenizer, prepared)
    return None if built is None else (time.perf_counter() - start) * 1000


class XGrammar:
    """Raw xgrammar over the same vocabulary, or why it is skipped."""

    def __init__(self, hf_tokenizer: Any) -> None:
        try:
            import torch
            import xgrammar
        except ImportError as exc:
            self.skipped: str | None = f"not installed ({exc}); pip install -e .[bench]"
            return
        self.skipped = None
        self.xgr, self.torch = xgrammar, torch
        self.info = xgrammar.TokenizerInfo.from_huggingface(hf_tokenizer,
                                                            vocab_size=LLADA_VOCAB)

    def ms(self, schema: dict[str, Any]) -> float | None:
        start = time.perf_counter()
        try:
            compiler = self.xgr.GrammarCompiler(self.info, cache_enabled=False)
            compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
            matcher = self.xgr.GrammarMatcher(compiled)
            bitmask = self.xgr.allocate_token_bitmask(1, self.info.vocab_size)
            matcher.fill_next_token_bitmask(bitmask)
        except Exception:  # noqa: BLE001 - any failure is "not built", as for the others
            return None
        return (time.perf_counter() - start) * 1000


def summary(times: list[float | None]) -> dict[str, Any]:
    built = sorted(t for t in times if t is not None)
    out: dict[str, Any] = {"accepted_pct": round(100 * len(built) / len(times), 1)}
    if built:
        out |= {"compile_ms_median": round(statistics.median(built), 1),
                "compile_ms_p90": round(built[int(0.9 * (len(built) - 1))], 1),
                "compile_ms_max": round(built[-1], 1)}
    return out


def refusal(schema: dict[str, Any]) -> str | None:
    try:
        check_schema(schema)
    except ConstraintError as exc:
        reason = str(exc)
        return reason.split(": ", 1)[1] if reason.startswith("schema") else reason
    return None


def trees(args: argparse.Namespace) -> dict[str, Any]:
    """--generate's figures of each --tree (NAME=PATH) over one checkpoint, each tree in
    its own process (benchmarks/jsonschemabench_generate.py with PYTHONPATH=PATH), one
    after the other (never two models in memory at once)."""
    out: dict[str, Any] = {"vocabulary": args.generate_vocab, "gen_length": args.gen_length,
                           "per_dataset": args.per_dataset, "batch": args.batch, "trees": {}}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = big_vocab_checkpoint(Path(tmp) / "generate", size=args.generate_vocab)
        for name, path in (tree.split("=", 1) for tree in args.tree):
            command = [sys.executable, str(REPO / "benchmarks" / "jsonschemabench_generate.py"),
                       "--checkpoint", str(checkpoint), "--per-dataset", str(args.per_dataset),
                       "--gen-length", str(args.gen_length)]
            if args.datasets:
                command += ["--datasets", *args.datasets]
            if args.batch:
                command += ["--batch", str(args.batch)]
            env = {**os.environ, "PYTHONPATH": str(Path(path).resolve())}
            done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True,
                                  env=env)
            out["trees"][name] = json.loads(done.stdout)
            print(json.dumps({name: out["trees"][name]}), file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-dataset", type=int, default=20)
    parser.add_argument("--datasets", nargs="*", help="only these (default: all ten)")
    parser.add_argument("--generate", action="store_true",
                        help="also generate one constrained answer per accepted schema")
    parser.add_argument("--gen-length", type=int, default=128,
                        help="answer tokens of --generate's canvas")
    parser.add_argument("--generate-vocab", type=int, default=4096,
                        help="vocabulary size of --generate's random checkpoint")
    parser.add_argument("--tree", action="append", default=[],
                        help="NAME=PATH: only --generate's figures, for each source tree "
                             "(repeatable)")
    parser.add_argument("--batch", type=int,
                        help="with --tree: one batch of this many schemas, the datasets' "
                             "in turn (default: one batch per dataset)")
    args = parser.parse_args()
    if args.tree:
        print(json.dumps(trees(args), indent=2))
        return
    datasets = {name: rows for name, rows in load(args.per_dataset).items()
                if not args.datasets or name in args.datasets}
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = big_vocab_checkpoint(Path(tmp) / "big")
        hf_tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        start = time.perf_counter()
        tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Vocabulary(hf_tokenizer)))
        xgrammar = XGrammar(hf_tokenizer)
        out: dict[str, Any] = {
            "vocabulary": LLADA_VOCAB,
            "vocabulary_preprocessing_s": round(time.perf_counter() - start, 2),
            "generate": {"vocabulary": args.generate_vocab, "gen_length": args.gen_length}
            if args.generate else None,
            "xgrammar": xgrammar.skipped or "raw, approximating some keywords",
            "datasets": {}}
        model = None
        if args.generate:
            from dinfer_engine import Engine

            model = Engine.from_pretrained(
                checkpoint if args.generate_vocab == LLADA_VOCAB else
                big_vocab_checkpoint(Path(tmp) / "generate", size=args.generate_vocab))
        everything: dict[str, list[float | None]] = {"ours": [], "llguidance_raw": [],
                                                      "xgrammar_raw": []}
        for name, rows in datasets.items():
            schemas = [row["schema"] for row in rows]
            times = {"ours": [ours_ms(tokenizer, s) for s in schemas],
                     "llguidance_raw": [llguidance_ms(tokenizer, s) for s in schemas]}
            if xgrammar.skipped is None:
                times["xgrammar_raw"] = [xgrammar.ms(s) for s in schemas]
            reasons = Counter(r for r in map(refusal, schemas) if r is not None)
            entry: dict[str, Any] = {"schemas": len(schemas)}
            entry |= {engine: summary(t) for engine, t in times.items()}
            entry["refused"] = dict(reasons.most_common())
            if model is not None:
                accepted = [s for s, t in zip(schemas, times["ours"], strict=True)
                            if t is not None]
                entry["generate"] = generated(model, accepted, args.gen_length)
            out["datasets"][name] = entry
            print(json.dumps({name: entry}), file=sys.stderr, flush=True)  # as it goes
            for engine, t in times.items():
                everything[engine] += t
        out["all"] = {engine: summary(t) for engine, t in everything.items() if t}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
