"""How the two production tokenizers in this folder were made (run once, by hand; the
tests only read the files it wrote). Needs what the project does not depend on:
`sentencepiece`, `protobuf`, `tiktoken` and the `mistral-common` wheel, in a venv of
its own:

    pip download mistral-common==1.13.1 --no-deps -d /tmp/mc && unzip /tmp/mc/*.whl
    python tests/assets/tokenizers/convert.py /tmp/mc/mistral_common/data

- `mistral-sp-v3/`: `mistral_instruct_tokenizer_240323.model.v3` (Mistral 7B v0.3's
  SentencePiece BPE, 32,768 tokens, byte fallback, spaces as U+2581), converted by
  transformers' LlamaConverter (AutoTokenizer on the .model), whole.
- `tekken-16k/`: `tekken_240911.json` (Mistral NeMo's tiktoken-style byte-level BPE),
  its 1,000 special tokens and its first 16,384 ranks (a BPE's merges only ever join
  lower ranks, so the first N ranks are a complete BPE of their own: the full 131,072
  would be 19 MB), converted by transformers' `convert_tekken_tokenizer`.

Both get the chat template mistral-common writes for them (tools included), and a
`tokenizer_config.json` naming the generic fast class (as LLaDA's does) and a mask
token, an unused control token of the vocabulary (diffusion models add one).

The tokenizer files are Mistral AI's, shipped in the `mistral-common` wheel under the
Apache License 2.0 (its `License-Expression`), and are redistributed here under it."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from tokenizers import Tokenizer

HERE = Path(__file__).parent
TEKKEN_RANKS = 16_384
SP_MASK, TEKKEN_MASK = "[control_748]", "<SPECIAL_999>"


def tokenizer_config(mask: str) -> dict[str, object]:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
            "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<unk>",
            "mask_token": mask, "model_max_length": 32768}


def write(directory: Path, tokenizer: object, template: str, mask: str) -> None:
    directory.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer.save_pretrained(scratch)  # type: ignore[attr-defined]
        # compact JSON: the same tokenizer in a third of the lines' bytes
        Tokenizer.from_file(str(Path(scratch) / "tokenizer.json")).save(
            str(directory / "tokenizer.json"), pretty=False)
    (directory / "tokenizer_config.json").write_text(
        json.dumps(tokenizer_config(mask), indent=2) + "\n")
    (directory / "chat_template.jinja").write_text(template)


def sentencepiece(data: Path) -> None:
    from mistral_common.integrations.chat_templates.chat_templates import (
        convert_tokenizer_to_chat_template,
    )
    from transformers import AutoTokenizer

    source = data / "mistral_instruct_tokenizer_240323.model.v3"
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copy(source, Path(scratch) / "tokenizer.model")
        (Path(scratch) / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "LlamaTokenizer", "legacy": False, "add_bos_token": True,
            "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
        tokenizer = AutoTokenizer.from_pretrained(scratch)
    write(HERE / "mistral-sp-v3", tokenizer, convert_tokenizer_to_chat_template(str(source)),
          SP_MASK)


def tekken(data: Path) -> None:
    from mistral_common.integrations.chat_templates.chat_templates import (
        convert_tokenizer_to_chat_template,
    )
    from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer

    source = data / "tekken_240911.json"
    raw = json.loads(source.read_text())
    raw.pop("image", None)
    raw["vocab"] = raw["vocab"][:TEKKEN_RANKS]
    raw["config"].update(default_vocab_size=raw["config"]["default_num_special_tokens"]
                         + TEKKEN_RANKS, num_vocab_tokens=TEKKEN_RANKS)
    with tempfile.TemporaryDirectory() as scratch:
        trimmed = Path(scratch) / "tekken.json"
        trimmed.write_text(json.dumps(raw))
        template = convert_tokenizer_to_chat_template(str(source))
        tokenizer = convert_tekken_tokenizer(str(trimmed), chat_template=template)
    write(HERE / "tekken-16k", tokenizer, template, TEKKEN_MASK)


if __name__ == "__main__":
    sentencepiece(Path(sys.argv[1]))
    tekken(Path(sys.argv[1]))
