"""A character-level tokenizer in the Hugging Face format (tokenizer.json), loadable with
`transformers.AutoTokenizer` from a local directory."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

EOS, MASK, PAD, UNK = "<|eos|>", "<|mask|>", "<|pad|>", "<|unk|>"
SPECIALS = [PAD, EOS, UNK, MASK]


def build_char_tokenizer(chars: str, appended: str = "") -> PreTrainedTokenizerFast:
    """One token per character of `chars` (sorted), after the special tokens pad=0, eos=1,
    unk=2, mask=3, then one per character of `appended` in its order (a vocabulary grown
    this way keeps the ids it had). A BPE model with no merges splits text into
    characters; Fuse joins them back."""
    base = sorted(set(chars))
    added = [c for c in dict.fromkeys(appended) if c not in base]
    vocab = {tok: i for i, tok in enumerate(SPECIALS + base + added)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(SPECIALS)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=EOS, pad_token=PAD, unk_token=UNK, mask_token=MASK
    )


def save_char_tokenizer(chars: str, directory: Path,
                        appended: str = "") -> PreTrainedTokenizerFast:
    """Save with `save_pretrained`, naming the class both transformers 4.x and 5.x load."""
    tokenizer = build_char_tokenizer(chars, appended)
    tokenizer.save_pretrained(directory)
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config.pop("backend", None)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return tokenizer
