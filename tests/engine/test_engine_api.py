"""The public API the service builds on: loading, config resolution, results, callbacks."""

from __future__ import annotations

import copy

import pytest
import torch

from dinfer_engine import Engine, GenerationConfig, GenerationResult
from tests.tiny_model import EOS_ID, EXTRA_STOP_ID, MASK_ID

SHORT = GenerationConfig(gen_length=8, block_length=4)


def test_from_pretrained_exposes_model_and_tokenizer(tiny_engine: Engine):
    assert tiny_engine.mask_id == MASK_ID
    assert tiny_engine.eos_id == EOS_ID
    assert tiny_engine.stop_ids == sorted([EOS_ID, EXTRA_STOP_ID])
    assert next(tiny_engine.model.parameters()).dtype == torch.float32
    ids = torch.tensor([tiny_engine.tokenizer("abc")["input_ids"]])
    assert tiny_engine.model(ids).logits.shape == (1, 3, tiny_engine.model.config.vocab_size)


def test_from_pretrained_dtype(tiny_checkpoint):
    eng = Engine.from_pretrained(tiny_checkpoint, dtype="bfloat16")
    assert next(eng.model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        Engine.from_pretrained(tiny_checkpoint, dtype="float8")


def test_generate_returns_results_in_input_order_and_calls_back(tiny_engine: Engine):
    prompts = ["a much longer prompt than the others", "hi", [5, 6, 7]]
    seen: list[int] = []
    outs = tiny_engine.generate(prompts, SHORT, on_result=lambda i, r: seen.append(i))
    assert sorted(seen) == [0, 1, 2]
    assert seen[0] == 0  # longest first
    for prompt, out in zip(prompts, outs, strict=True):
        alone = tiny_engine.generate([prompt], SHORT)[0]
        assert isinstance(out, GenerationResult)
        assert out.token_ids == alone.token_ids
        assert out.text == alone.text
        assert out.completion_tokens == len(out.token_ids)
        assert out.finish_reason in ("stop", "length")
        assert out.nfe > 0 and out.seconds > 0
    assert outs[2].prompt_tokens == 3
    assert outs[1].prompt_tokens == len(tiny_engine.tokenizer("hi")["input_ids"])


def test_config_takes_generation_config_json_then_engine_defaults(tiny_engine: Engine):
    eng = Engine(tiny_engine.model, tiny_engine.tokenizer, {"gen_length": 12, "cache": "dual"})
    resolved = eng.resolve_config(GenerationConfig(block_length=4))
    assert (resolved.gen_length, resolved.block_length, resolved.cache) == (12, 4, "dual")
    assert resolved.steps == 12 and resolved.decoder == "fixed" and resolved.threshold == 0.9
    assert eng.resolve_config(GenerationConfig(gen_length=8, block_length=4,
                                               cache="none")).cache == "none"


def test_model_default_steps_only_apply_to_the_model_default_gen_length(tiny_engine: Engine):
    eng = Engine(tiny_engine.model, tiny_engine.tokenizer,
                 {"gen_length": 24, "block_length": 8, "steps": 12})
    assert eng.resolve_config().steps == 12
    assert eng.resolve_config(GenerationConfig(block_length=4)).steps == 12
    assert eng.resolve_config(GenerationConfig(gen_length=40)).steps == 40
    assert eng.resolve_config(GenerationConfig(gen_length=40, steps=20)).steps == 20


def test_chat_applies_the_tokenizer_template_when_it_has_one(tiny_engine: Engine):
    config = GenerationConfig(gen_length=4, block_length=4, chat=True)
    plain = tiny_engine.generate(["hi"], config)[0]
    assert plain.prompt_tokens == 2  # the char tokenizer has no template: text as is
    tokenizer = copy.deepcopy(tiny_engine.tokenizer)
    tokenizer.chat_template = (
        "{% for m in messages %}user: {{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %} ={% endif %}")
    eng = Engine(tiny_engine.model, tokenizer)
    assert eng.generate(["hi"], config)[0].prompt_tokens == len("user: hi =")
    assert eng.generate(["hi"], GenerationConfig(gen_length=4, block_length=4))[0] \
        .prompt_tokens == 2


def test_no_prompts_no_results(tiny_engine: Engine):
    assert tiny_engine.generate([], SHORT) == []


def test_a_single_string_is_not_a_list_of_prompts(tiny_engine: Engine):
    with pytest.raises(ValueError, match="not one string"):
        tiny_engine.generate("hello", SHORT)


@pytest.mark.parametrize(("config", "message"), [
    (GenerationConfig(decoder="beam"), "unknown decoder"),
    (GenerationConfig(cache="paged"), "unknown cache"),
    (GenerationConfig(gen_length=10, block_length=4, steps=4), r"number of blocks \(3: "),
    (GenerationConfig(gen_length=8, block_length=4, steps=3), "multiple of the number of blocks"),
    (GenerationConfig(gen_length=0), "gen_length must be an integer >= 1"),
    (GenerationConfig(temperature=-1.0), "temperature must be >= 0"),
    (GenerationConfig(threshold=1.5), "threshold must be in"),
    (GenerationConfig(max_batch_size=0), "max_batch_size"),
    (GenerationConfig(seed="x"), "seed"),
    (GenerationConfig(early_stop="yes"), "early_stop"),
])
def test_invalid_config_raises_value_error(tiny_engine: Engine, config, message):
    with pytest.raises(ValueError, match=message):
        tiny_engine.generate(["hi"], config)


def test_prompt_too_long_raises_value_error_naming_it(tiny_engine: Engine):
    limit = tiny_engine.model.config.max_sequence_length
    with pytest.raises(ValueError, match="prompt 1: .*max_sequence_length"):
        tiny_engine.generate(["ok", [5] * (limit - 7)], SHORT)
    with pytest.raises(ValueError, match="prompt 0: .*token ids"):
        tiny_engine.generate([[10_000]], SHORT)
