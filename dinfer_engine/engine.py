"""The public entry point: a loaded model with its tokenizer, generating for many prompts."""

from __future__ import annotations

import json
import secrets
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from dinfer_engine import plans
from dinfer_engine.batch import FinishedRow, Request
from dinfer_engine.choices import KERNELS
from dinfer_engine.constraints.compiled import CompiledConstraints
from dinfer_engine.constraints.grammar import Grammar
from dinfer_engine.constraints.spec import ConstraintSpec
from dinfer_engine.constraints.spec_errors import ConstraintTooLarge
from dinfer_engine.constraints.vocabulary import Vocabulary, token_bytes
from dinfer_engine.generation_config import (
    GenerationConfig,
    ResolvedConfig,
    for_request,
    require_choice,
)
from dinfer_engine.generation_fields import FIELDS, family_defaults
from dinfer_engine.infill import Prompt
from dinfer_engine.loading.checkpoint import check_tensor_parallel, load_model
from dinfer_engine.loading.tokenizer import load_tokenizer
from dinfer_engine.models.base import DiffusionLM
from dinfer_engine.parallel.group import Group
from dinfer_engine.plans import Plan
from dinfer_engine.prefix_cache import PrefixCache
from dinfer_engine.ranks import commands
from dinfer_engine.ranks.ranks import Ranks
from dinfer_engine.request import GenerationRequest, as_request
from dinfer_engine.request_check import request_problem
from dinfer_engine.result import GenerationResult
from dinfer_engine.row_budget import RowBudget
from dinfer_engine.sampling_controls import SamplingControls
from dinfer_kernels import backend

GENERATION_CONFIG_FILE = "generation_config.json"
# context tokens an answer is decoded after (Engine._decode): enough for any merge of
# bytes into one character (4) and a word boundary
DECODE_CONTEXT = 8
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

ResultCallback = Callable[[int, GenerationResult], None]


class Engine:
    def __init__(self, model: DiffusionLM, tokenizer: PreTrainedTokenizerBase,
                 model_defaults: dict[str, Any] | None = None, ranks: Ranks | None = None,
                 prefix_cache_bytes: int = 0, kernels: str = "auto") -> None:
        """model_defaults: the checkpoint's generation_config.json (GenerationConfig field
        names, plus `eos_token_id`, an int or a list, naming extra stop tokens). ranks:
        the helper ranks of a tensor-parallel engine, `model` being rank 0's part.
        prefix_cache_bytes: the budget of the prompt prefix cache that block-causal
        models share whole prompt blocks through (dinfer_engine/prefix_cache.py; 0: none),
        counted for the whole model's keys/values (each rank holds its shard).
        kernels: "auto", "torch" or "triton", which implementation runs
        (dinfer_kernels/backend.py); every rank follows rank 0's; may be changed between calls."""
        require_choice("kernels", kernels, KERNELS)
        self.kernels = kernels
        self.model = model
        self.tokenizer = tokenizer
        self.ranks = ranks
        if ranks is not None:  # helpers end with the engine, even if close() is never called
            weakref.finalize(self, ranks.close)
        # the family's recommended settings, under the checkpoint's own
        self.model_defaults = {**family_defaults(model.family_key), **(model_defaults or {})}
        extra = self.model_defaults.get("eos_token_id") or []
        extra = [extra] if isinstance(extra, int) else list(extra)
        self.stop_ids = sorted({self.eos_id, *extra})
        # grammars and compile failures by spec digest, bounded by bytes; its `limits`
        # may be changed (the service sets them from its settings)
        self.constraints = CompiledConstraints(self._vocabulary)
        # DiffusionGemma's causal encoder shares its prompt blocks too (ADR 034)
        self.prefix = PrefixCache(prefix_cache_bytes, model.kv_token_bytes()) \
            if model.family.block_causal and prefix_cache_bytes else None

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype | str | None = None,
                        tensor_parallel: int = 1, prefix_cache_bytes: int = 0,
                        kernels: str = "auto") -> Engine:
        """Load a local checkpoint directory; dtype defaults to fp32 on CPU, bf16 elsewhere.
        tensor_parallel N > 1: the model is split over N ranks, this process being rank 0
        and ranks 1..N-1 child processes (on CUDA, rank r on the r-th GPU from `device`;
        dinfer_engine/ranks/, docs/adr/011-tensor-parallel.md); close() or `with` ends them.
        ValueError when a dimension of the model does not divide by N.
        prefix_cache_bytes, kernels: see __init__."""
        path, device = Path(path), torch.device(device)
        if isinstance(dtype, str):
            if dtype not in DTYPES:
                raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
            dtype = DTYPES[dtype]
        if dtype is None:
            dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        if isinstance(tensor_parallel, bool) or not isinstance(tensor_parallel, int) \
                or tensor_parallel < 1:
            raise ValueError(f"tensor_parallel must be an integer >= 1, got {tensor_parallel!r}")
        if tensor_parallel == 1:
            return cls(load_model(path, device, dtype), *cls._tokenizer_and_defaults(path),
                       prefix_cache_bytes=prefix_cache_bytes, kernels=kernels)
        check_tensor_parallel(path, tensor_parallel)  # before any process starts
        ranks = Ranks.start(str(path), device, dtype, tensor_parallel)
        try:
            model = load_model(path, device, dtype, Group(0, tensor_parallel))
            ranks.replies()  # every helper has loaded its shard
            ranks.join()
            return cls(model, *cls._tokenizer_and_defaults(path), ranks=ranks,
                       prefix_cache_bytes=prefix_cache_bytes, kernels=kernels)
        except BaseException as exc:
            failure = ranks.failed(exc)
            if failure is exc:
                raise
            raise failure from exc

    @staticmethod
    def _tokenizer_and_defaults(path: Path) -> tuple[PreTrainedTokenizerBase, dict[str, Any]]:
        defaults_path = path / GENERATION_CONFIG_FILE
        defaults = json.loads(defaults_path.read_text()) if defaults_path.is_file() else {}
        return load_tokenizer(path), defaults

    @property
    def tensor_parallel(self) -> int:
        return 1 if self.ranks is None else 1 + len(self.ranks.processes)

    def close(self) -> None:
        """Stop the helper ranks of a tensor-parallel engine (nothing to do otherwise)."""
        if self.ranks is not None:
            self.ranks.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def logits(self, token_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """The full logits [B, S, vocabulary] of one plain forward over token ids [B, S]
        (CPU, gathered from every rank), for tests and checks."""
        ids = [list(row) for row in token_ids]
        if self.ranks is None:
            return commands.logits(self.model, ids)
        return torch.cat(self._on_every_rank("logits", ids), dim=-1)

    def parameter_bytes(self) -> list[int]:
        """The bytes of parameters each rank holds, in rank order."""
        if self.ranks is None:
            return [commands.parameter_bytes(self.model)]
        return self._on_every_rank("parameter_bytes")

    @property
    def mask_id(self) -> int:
        return self.model.config.mask_token_id

    @property
    def eos_id(self) -> int:
        return self.model.config.eos_token_id

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def resolve_config(self, config: GenerationConfig | None = None) -> ResolvedConfig:
        """The config with every field filled and validated (ValueError if invalid)."""
        return (config or GenerationConfig()).resolve(self.model_defaults,
                                                      self.model.family_key)

    def encode(self, prompt: str | Sequence[int], config: ResolvedConfig) -> list[int]:
        """Token ids of one prompt under a resolved config; ValueError if it cannot be
        generated for (bad ids, or prompt + gen_length beyond max_sequence_length)."""
        ids = self._tokenize(prompt, config.chat) if isinstance(prompt, str) \
            else self._checked_ids(prompt)
        limit = self.model.config.max_sequence_length
        if len(ids) + config.gen_length > limit:
            raise ValueError(f"prompt of {len(ids)} tokens + gen_length {config.gen_length} "
                             f"exceeds the model's max_sequence_length {limit}")
        return ids

    def plan(self, prompt: Prompt, config: ResolvedConfig) -> Plan:
        """The rows the loop decodes for one prompt and how its result is made of them
        (dinfer_engine/plans.py); ValueError if it cannot be generated for."""
        return plans.plan_prompt(prompt, config, lambda ids: self.encode(ids, config),
                                 self._piece_ids, self.mask_id,
                                 self.model.config.max_sequence_length)

    def generate(self, requests: Sequence[Prompt | GenerationRequest],
                 config: GenerationConfig | None = None,
                 on_result: ResultCallback | None = None) -> list[GenerationResult]:
        """Generate for every request (a `dinfer_engine.GenerationRequest`: a prompt with
        its own seed, constraint, cache scope and sampling controls; or a plain prompt:
        text, token ids, or a `dinfer_engine.Infill` canvas to fill in); results in input
        order. `on_result(index, result)` is called as each request finishes. Requests
        that differ only in their own values (seed, constraint, scope, controls, per-row
        fields) share a batch; a field set per request that is not per-row is a
        ValueError, as are ConstraintFailures naming every request whose constraint
        cannot be compiled and ConstraintTooLarge (one of them) every request whose
        constrained row alone would pass config.constraint_memory_mb, before any forward
        (docs/structured-outputs.md)."""
        if isinstance(requests, str):
            raise ValueError("prompts must be a list of prompts, not one string")
        with backend.choosing(self.kernels):
            return self._generate([as_request(r) for r in requests], config, on_result)

    def _generate(self, asked: list[GenerationRequest], config: GenerationConfig | None,
                  on_result: ResultCallback | None) -> list[GenerationResult]:
        resolved = self.resolve_config(config)
        prompt_plans = self._plans(asked, resolved)
        grammars = self._grammars([request.constraint for request in asked], resolved)
        rows: list[Request] = []
        for plan, grammar, request in zip(prompt_plans, grammars, asked, strict=True):
            seed = self._seed(request.seed, plan.config)
            rows += [Request(len(rows) + i, row.prompt, seed, canvas=row.canvas,
                             constraint=grammar, scope=request.scope, controls=plan.controls)
                     for i, row in enumerate(plan.rows)]
        results: dict[int, GenerationResult] = {}

        def finish(index: int, finished: list[FinishedRow]) -> None:
            results[index] = prompt_plans[index].result(finished, self.stop_ids, self._decode)
            if on_result is not None:
                on_result(index, results[index])

        self._run(rows, plans.run_config(prompt_plans, resolved),
                  plans.PromptRows(prompt_plans, finish).finish)
        return [results[index] for index in range(len(asked))]  # every row finishes

    def _plans(self, asked: list[GenerationRequest], resolved: ResolvedConfig) -> list[Plan]:
        """Each request's plan, checked by the one request check
        (dinfer_engine/request_check.py): a request that cannot run raises, naming its
        index, before any forward."""
        planned: list[Plan] = []
        for index, request in enumerate(asked):
            try:
                plan = self.plan(request.prompt, for_request(resolved, self._own(request)))
                # each row's controls from its request's config (its own over the call's)
                plan.controls = SamplingControls.of(plan.config,
                                                    self.model.config.embedding_size)
                problem = request_problem(self.model.family_key, resolved.decoder,
                                          infill=plan.infill,
                                          constrained=request.constraint is not None,
                                          stops_banned=bool(plan.config.ignore_eos
                                                            or plan.config.min_tokens))
                if problem is not None:
                    raise ValueError(problem)
                planned.append(plan)
            except ValueError as exc:
                raise ValueError(f"prompt {index}: {exc}") from exc
        return planned

    def _own(self, request: GenerationRequest) -> dict[str, Any]:
        """A request's own values of per-row fields (its controls' among them); ValueError
        naming one its model's canvases do not read."""
        own = dict(request.fields) if request.controls is None \
            else {**request.fields, **request.controls.fields()}
        canvas = self.model.family.canvas
        for name, value in own.items():
            if name in FIELDS and canvas not in FIELDS[name].canvases \
                    and value not in (None, FIELDS[name].default):
                raise ValueError(f"{name} does not apply to {self.model.family.name} "
                                 f"({canvas} canvases)")
        return own

    def _run(self, requests: list[Request], run_with: ResolvedConfig,
             on_finish: Callable[[FinishedRow], None]) -> None:
        """The family's loop over `requests`, here or on every rank of the replica (the
        same Request objects: commands.RankCall)."""
        call = commands.RankCall(requests, run_with, self.stop_ids, self.kernels,
                                 self.prefix.budget if self.prefix is not None else 0)
        if self.ranks is None:
            commands.generate(self.model, call, on_finish, self.prefix)
            return
        self._on_every_rank("generate", call, on_finish=on_finish, prefix=self.prefix)

    def _grammars(self, constraints: Sequence[ConstraintSpec | None], config: ResolvedConfig
                  ) -> list[Grammar | None]:
        """Each prompt's grammar; ConstraintFailures naming the prompts whose constraint
        cannot compile, then ConstraintTooLarge those whose row alone would hold more than
        the constraint memory budget (dinfer_engine/row_budget.py), before any forward."""
        grammars = self.constraints.for_prompts(constraints)
        refused = RowBudget.of(self.model, config).refusals(grammars)
        if refused:
            raise ConstraintTooLarge(refused)
        return grammars

    def compile(self, spec: ConstraintSpec) -> Grammar:
        """The spec's grammar over this model's vocabulary, compiled once per distinct
        spec, and a failure remembered as well (dinfer_engine/constraints/compiled.py);
        ConstraintError (a ValueError) if it cannot be."""
        return self.constraints.get(spec)

    def constraint_error(self, spec: ConstraintSpec) -> str | None:
        """Why the spec cannot be compiled, or None: compiled on first use, and its grammar
        or its failure remembered (so a caller may compile a call's constraints one at a
        time, ahead of it)."""
        return self.constraints.reason(spec)

    def _vocabulary(self) -> Vocabulary:
        size = self.model.config.embedding_size
        spelled = {i: b for i, b in token_bytes(self.tokenizer).items() if i < size}
        return Vocabulary(spelled, self.stop_ids, size, self.mask_id)

    def prefix_cache_stats(self) -> dict[str, int]:
        """Rank 0's prefix cache: bytes and blocks held, prompt tokens reused and blocks
        evicted since the engine started (zeros without a cache)."""
        if self.prefix is None:
            return PrefixCache(0, 0).stats()
        return self.prefix.stats()

    def peak_memory_mb(self) -> list[float]:
        """Each rank's peak memory so far (CUDA: peak allocated; CPU: peak RSS), in rank
        order, for benchmarks."""
        if self.ranks is None:
            return [commands.peak_memory_mb(self.model)]
        return self._on_every_rank("peak_memory_mb")

    def _on_every_rank(self, name: str, *args: Any, **local: Any) -> list[Any]:
        """Run commands.COMMANDS[name] on every rank, here with the extra `local` keyword
        arguments; the answers in rank order. When rank 0 fails, the helpers are stopped
        (they could not follow it out of the loop) and a lost rank raises RankFailure."""
        assert self.ranks is not None
        self.ranks.send(name, *args)
        try:
            mine = commands.COMMANDS[name](self.model, *args, **local)
        except BaseException as exc:
            failure = self.ranks.failed(exc)
            if failure is exc:
                raise
            raise failure from exc
        return [mine, *self.ranks.replies()]

    def _checked_ids(self, ids: Sequence[int]) -> list[int]:
        checked = [int(t) for t in ids]
        vocab = self.model.config.embedding_size
        if any(not 0 <= t < vocab for t in checked):
            raise ValueError(f"prompt token ids must lie in [0, {vocab})")
        return checked

    def _piece_ids(self, piece: str | Sequence[int], first: bool) -> list[int]:
        """An infill piece's token ids: text tokenized as a prompt when it comes first,
        else as a continuation (Engine._continuation)."""
        if isinstance(piece, str):
            return list(self.tokenizer(piece)["input_ids"]) if first \
                else self._continuation(piece)
        return self._checked_ids(piece)

    def _decode(self, ids: list[int], context: Sequence[int] = ()) -> str:
        """The text of `ids` as it continues `context` (the tokens before them): decoded
        after the last few context tokens and without their text, so a decoder that drops
        a text's leading space (SentencePiece's Strip: "▁Paris" alone is "Paris") or
        joins bytes (byte fallback) reads the answer as it stands in the whole text."""
        tail = list(context[-DECODE_CONTEXT:])
        text = str(self.tokenizer.decode(tail + list(ids), skip_special_tokens=True))
        before = str(self.tokenizer.decode(tail, skip_special_tokens=True)) if tail else ""
        if tail and text.startswith(before) and "\ufffd" not in before:
            return text[len(before):]
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def _continuation(self, text: str) -> list[int]:
        """Token ids of a text that continues another (an infill piece after a gap), with
        no word marker of its own: SentencePiece (Metaspace) starts every text it encodes
        with a space ("\u2581"), so the text is encoded after a newline, whose tokens are
        then dropped."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        newline = self.tokenizer("\n", add_special_tokens=False)["input_ids"]
        after = self.tokenizer("\n" + text, add_special_tokens=False)["input_ids"]
        if after[:len(newline)] == newline and len(after) > len(newline):
            return list(after[len(newline):])
        return list(ids)

    def _tokenize(self, text: str, chat: bool) -> list[int]:
        if chat and self.tokenizer.chat_template:
            text = str(self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False))
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(text)["input_ids"]

    @staticmethod
    def _seed(seed: int | None, config: ResolvedConfig) -> int:
        """A row's seed: the request's, else the config's, else a fresh one."""
        if seed is None:
            seed = config.seed
        return secrets.randbits(63) if seed is None else seed
