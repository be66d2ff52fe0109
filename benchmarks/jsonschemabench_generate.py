"""jsonschemabench.py --generate's answers, in a process of their own: one constrained
answer per accepted schema of each dataset, all of a dataset's in one batch, on a given
checkpoint, and the same prompts unconstrained. Per dataset: the share of answers that
end "stop" and the share of those that jsonschema validates, how many "length" answers
had no valid answer within the canvas from their start (as far as the engine's search
finds), tokens/s per generated token constrained and unconstrained (early stop on, so
each counts the tokens its answers hold), and the peak resident memory above the
process's before each generate (sampled every 10 ms), and the process's peak. The
allocator keeps freed memory for reuse (ADR 038), so a dataset after the first starts
with free heap in hand and its figure above the start is a floor: the first dataset's
and the process's peak are the ones to compare. --batch N instead runs one batch of the
first N schemas the engine accepts, the datasets taken in turn ("pooled").

Imports only the engine of its PYTHONPATH (`--tree NAME=PATH` runs one per source tree
over one checkpoint), so it is run as a script:

    PYTHONPATH=/tmp/main python benchmarks/jsonschemabench_generate.py --checkpoint DIR"""

from __future__ import annotations

import argparse
import json
import resource
import threading
import time
from pathlib import Path
from typing import Any

import jsonschema

DATA = Path(__file__).resolve().parent / "data" / "jsonschemabench"


def valid(schema: dict[str, Any], text: str) -> bool:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls(schema, format_checker=cls.FORMAT_CHECKER).validate(json.loads(text))
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def closable(grammar: Any, gen_length: int) -> bool:
    """Whether the engine finds a valid answer and a stop token within the canvas from
    the answer's start (dinfer_engine/constraints/closing.py): where not, "length" is all
    it can do."""
    from dinfer_engine.constraints.closing import completer
    from dinfer_engine.constraints.grammar import Matcher

    paths = completer(grammar.vocabulary, grammar.kind == "json_schema")
    return paths.search(Matcher(grammar.matcher(), grammar.vocabulary), paths.start(),
                        gen_length - 1) is not None


def resident_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


class PeakMemory:
    """The peak resident memory above the start while in the `with` block."""

    def __enter__(self) -> PeakMemory:
        self.start = self.peak = resident_mb()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._done.wait(0.01):
            self.peak = max(self.peak, resident_mb())

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, resident_mb())

    @property
    def above_mb(self) -> float:
        return round(self.peak - self.start, 1)


def generated(engine: Any, schemas: list[dict[str, Any]], gen_length: int,
              rows: int | None = None) -> dict[str, Any]:
    """One constrained answer per schema from the engine (one batch; `rows`: only the
    first that many the engine accepts), and the same prompts unconstrained (see the
    module's doc)."""
    from dinfer_engine import GenerationConfig
    from dinfer_engine.constraints.spec import ConstraintSpec
    from dinfer_engine.request import GenerationRequest

    config = GenerationConfig(gen_length=gen_length, block_length=min(32, gen_length),
                              steps=gen_length // 2, decoder="threshold", threshold=0.9)
    specs = [ConstraintSpec.json_schema(schema) for schema in schemas]
    usable = [(schema, spec) for schema, spec in zip(schemas, specs, strict=True)
              if engine.constraint_error(spec) is None]
    accepted = len(usable)
    usable = usable[:rows]
    if not usable:
        return {"asked": len(schemas), "engine_refused": len(schemas)}
    prompts = ["answer:"] * len(usable)
    with PeakMemory() as memory:
        start = time.perf_counter()
        results = engine.generate([GenerationRequest(p, constraint=s)
                                   for p, (_, s) in zip(prompts, usable, strict=True)], config)
        seconds = time.perf_counter() - start
    start = time.perf_counter()
    free = engine.generate(prompts, config)
    free_seconds = time.perf_counter() - start
    constrained = sum(r.completion_tokens for r in results) / seconds
    unconstrained = sum(r.completion_tokens for r in free) / free_seconds
    stops = [(schema, r.text) for (schema, _), r in zip(usable, results, strict=True)
             if r.finish_reason == "stop"]
    good = [valid(schema, text) for schema, text in stops]
    no_room = sum(r.finish_reason == "length" and not closable(engine.compile(spec), gen_length)
                  for (_, spec), r in zip(usable, results, strict=True))
    out: dict[str, Any] = {
        "asked": len(schemas), "engine_refused": len(schemas) - accepted,
        "rows": len(usable),
        "stop_pct": round(100 * len(stops) / len(usable), 1),
        "length_without_room": no_room,
        "valid_pct_of_stop": round(100 * sum(good) / len(stops), 1) if stops else None,
        "seconds": round(seconds, 1), "peak_mb_above_start": memory.above_mb,
        "peak_mb_per_row": round(memory.above_mb / len(usable), 1),
        "tokens_per_s": {"constrained": round(constrained, 1),
                         "unconstrained": round(unconstrained, 1),
                         # None: every free answer ended at its first token
                         "ratio": round(constrained / unconstrained, 3) if unconstrained
                         else None}}
    invalid = [text[:300] for (_, text), ok in zip(stops, good, strict=True) if not ok]
    return out | ({"invalid": invalid} if invalid else {})


def load(per_dataset: int, only: list[str] | None) -> dict[str, list[dict[str, Any]]]:
    return {path.stem: [json.loads(line)["schema"] for line in path.read_text().splitlines()][
        :per_dataset] for path in sorted(DATA.glob("*.jsonl")) if not only or path.stem in only}


def pooled(datasets: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every dataset's schemas, the datasets' first ones first (each dataset in turn)."""
    longest = max(map(len, datasets.values()), default=0)
    return [schemas[i] for i in range(longest) for schemas in datasets.values()
            if i < len(schemas)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--per-dataset", type=int, default=20)
    parser.add_argument("--datasets", nargs="*")
    parser.add_argument("--gen-length", type=int, default=128)
    parser.add_argument("--batch", type=int,
                        help="one batch of this many accepted schemas from all datasets")
    args = parser.parse_args()
    import dinfer_engine
    from dinfer_engine import Engine

    engine = Engine.from_pretrained(args.checkpoint)
    out: dict[str, Any] = {"source": str(Path(dinfer_engine.__file__).parents[1]),
                           "datasets": {}}
    datasets = load(args.per_dataset, args.datasets)
    if args.batch:
        out["datasets"]["pooled"] = generated(engine, pooled(datasets), args.gen_length,
                                              args.batch)
    for name, schemas in ({} if args.batch else datasets).items():
        out["datasets"][name] = generated(engine, schemas, args.gen_length)
    out["process_peak_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
