"""Loading a checkpoint's tokenizer, without torch: the service checks prompt lengths with
it in processes that never run the model (`submit`), where importing torch would cost
more memory than the work itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers.utils import logging as hf_logging

from engine.config import CheckpointError

GENERIC_FAST = "PreTrainedTokenizerFast"


def load_tokenizer(directory: Path) -> Any:
    """The checkpoint's tokenizer as AutoTokenizer would load it, local files only. A
    checkpoint that names the generic fast tokenizer gets that class directly (what
    AutoTokenizer resolves it to), because AutoTokenizer's import pulls in torch."""
    # transformers reads config.json too and warns that it does not know "llada"; the
    # tokenizer is all we take from it, so that warning is noise here
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        if _tokenizer_class(directory) == GENERIC_FAST and (directory / "tokenizer.json").is_file():
            from transformers import PreTrainedTokenizerFast

            return PreTrainedTokenizerFast.from_pretrained(directory, local_files_only=True)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{directory}: cannot load the tokenizer ({exc})") from exc
    finally:
        hf_logging.set_verbosity(verbosity)


def _tokenizer_class(directory: Path) -> str | None:
    try:
        return json.loads((directory / "tokenizer_config.json").read_text()).get(
            "tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return None
