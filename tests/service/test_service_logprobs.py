"""logprobs through the service (`dinfer-batch run`): OpenAI's legacy completions shape
(`logprobs: N`) and the chat shape (`logprobs: true`, `top_logprobs`), one entry per
completion token, matching the engine's values."""

from dinfer_engine import Engine, GenerationConfig
from tests.service_helpers import read_jsonl, write_jsonl

# the tiny random model often ends its answer at once; without early_stop every answer
# has its 8 tokens
SMALL = {"max_tokens": 8, "block_length": 8, "early_stop": False}


def test_completion_and_chat_logprobs(sqlite_service, tmp_path, tiny_checkpoint):
    lines = [{"custom_id": "completion", "prompt": "add 1 2=", "logprobs": 2} | SMALL,
             {"custom_id": "chat", "messages": [{"role": "user", "content": "add 1 2="}],
              "logprobs": True, "top_logprobs": 3} | SMALL,
             {"custom_id": "plain", "prompt": "add 1 2="} | SMALL,
             {"custom_id": "samples", "prompt": "add 1 2=", "n": 2, "temperature": 1.0,
              "seed": 3, "logprobs": 1} | SMALL]
    out = tmp_path / "out.jsonl"
    result = sqlite_service.cli("run", write_jsonl(tmp_path / "in.jsonl", lines), "-o", out)
    assert result.exit_code == 0, result.output
    completion, chat, plain, samples = (line["response"]["body"] for line in read_jsonl(out))

    logprobs = completion["choices"][0]["logprobs"]
    tokens = completion["usage"]["completion_tokens"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == tokens > 0
    assert logprobs["text_offset"] == [sum(map(len, logprobs["tokens"][:i]))
                                       for i in range(tokens)]
    assert all(len(top) <= 2 for top in logprobs["top_logprobs"])
    engine = Engine.from_pretrained(tiny_checkpoint)
    [expected] = engine.generate(["add 1 2="], GenerationConfig(
        gen_length=8, block_length=8, early_stop=False, logprobs=True))
    assert logprobs["token_logprobs"] == expected.logprobs

    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == chat["usage"]["completion_tokens"]
    for entry in content:
        assert entry["logprob"] <= 0 and entry["bytes"] == list(entry["token"].encode())
        assert len(entry["top_logprobs"]) == 3
        assert entry["top_logprobs"][0]["logprob"] >= entry["logprob"] - 1e-9
    assert plain["choices"][0]["logprobs"] is None

    # n samples: each choice carries its own sample's log-probabilities
    first, second = (c["logprobs"] for c in samples["choices"])
    assert len(first["tokens"]) == len(second["tokens"]) == 8
    assert first["token_logprobs"] != second["token_logprobs"]  # seeds 3 and 4
