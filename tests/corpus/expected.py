"""What each corpus line (tests/corpus/lines/, sources in SOURCES.md) must come back as,
on every model the corpus tests run (the demo and the tiny production-tokenizer
checkpoints, all with a context of 256 tokens): an answer, or a refusal that names what
it asks for."""

from __future__ import annotations

from typing import NamedTuple


class Expect(NamedTuple):
    answers: bool
    says: tuple[str, ...] = ()  # a refusal's message names each of these


ANSWER = Expect(True)
# the line asks for more answer tokens than the model's context holds: refused as vLLM does
CONTEXT = Expect(False, ("context of 256",))



EXPECTED: dict[str, dict[str, Expect]] = {
    "openai_guide.jsonl": {"request-1": CONTEXT, "request-2": CONTEXT, "request-3": ANSWER,
                           "request-4": ANSWER},
    "vllm_example.jsonl": {"request-1": CONTEXT, "request-2": CONTEXT},
    "vllm_embeddings_score.jsonl": {
        "request-1": Expect(False, ("/v1/embeddings",)),
        "request-2": Expect(False, ("/v1/embeddings",)),
        "request-3": Expect(False, ("/v1/score",)), "request-4": Expect(False, ("/v1/score",))},
    "vllm_run_batch_tests.jsonl": {
        "request-1": CONTEXT, "request-5": Expect(False, ("stream", "never streamed")),
        "request-r1": ANSWER,
        "request-t1": CONTEXT,
        "request-a1": Expect(False, ("/v1/audio/transcriptions",))},
    "mistral_batch.jsonl": {
        key: ANSWER
        for key in ("0", "1", "2", "3")},
    "together_batch.jsonl": {
        key: ANSWER
        for key in ("request-1", "request-2")},
    "fastdeploy_run_batch.jsonl": {
        key: ANSWER
        for key in ("req-00001", "req-00002")},
    "groq_cookbook.jsonl": {"request-2": ANSWER},
    "sglang_completions.jsonl": {"request-1": ANSWER, "request-2": CONTEXT,
                                 "request-3": CONTEXT},
    "kluster_batch.jsonl": {
        key: ANSWER
        for key in ("line-1", "line-2", "line-3")},
    "azure_chat.jsonl": {"task-0": ANSWER, "task-1": ANSWER, "task-2": ANSWER,
                         "request-1": Expect(False, ("image_url", "no images")),
                         "task-s0": ANSWER},
    "azure_legacy_url.jsonl": {"task-0": ANSWER},
    "azure_responses.jsonl": {"task-0": ANSWER, "task-1": ANSWER, "task-2": ANSWER,
                              "task-3": Expect(False, ("input_image", "no images")),
                              "task-4": ANSWER},
    "controls.jsonl": {
        "completions-reference": ANSWER,
        "prompt-list": ANSWER,
        "prompt-token-ids": ANSWER,
        "echo-best-of": ANSWER,
        "penalties": ANSWER,
        "logit-bias": ANSWER,
        "vllm-extras": ANSWER,
        "min-tokens-ignore-eos": ANSWER,
        "json-object": ANSWER,
        "tool-choice-none": ANSWER,
        "ignored-fields": ANSWER,
        "reasoning-effort": Expect(False, ("reasoning_effort",)),
        "web-search": Expect(False, ("web_search",)),
        "audio-out": Expect(False, ("modalities", "only text output")),
    },
}
