"""dinfer_training/model_checks.py: the infill decoding and the repair measure, on a model that
knows the answers (an oracle over the true canvas) and on a random tiny model."""

from types import SimpleNamespace

import torch

from dinfer_training.model_checks import Special, decode_infill, infill_scores, repair_scores
from dinfer_training.tasks import CHARS, eval_set, held_out

VOCAB = {c: i + 4 for i, c in enumerate(CHARS)}
SPECIAL = Special(pad=0, eos=1, mask=3, vocab_size=4 + len(CHARS))


def encode(text):
    return [VOCAB[c] for c in text]


def decode(ids):
    inverse = {i: c for c, i in VOCAB.items()}
    return "".join(inverse.get(i, "?") for i in ids)


class Oracle(torch.nn.Module):
    """Predicts, with full confidence (or little), the token at every position of the
    canvas among `canvases` that agrees most with the row."""

    def __init__(self, canvases, sure=True):
        super().__init__()
        self.canvases, self.sure = canvases, sure

    def forward(self, ids, attention_mask=None):
        logits = torch.zeros(*ids.shape, SPECIAL.vocab_size)
        for i, row in enumerate(ids.tolist()):
            truth = max(self.canvases,
                        key=lambda c: sum(t == s for t, s in zip(row, c, strict=False)))
            for p, token in enumerate(truth):
                logits[i, p, token] = 20.0 if self.sure else 0.5
        return SimpleNamespace(logits=logits)


def canvas(ex):
    middle = encode(ex.answer) + [SPECIAL.eos] * (ex.span - len(ex.answer))
    return encode(ex.prompt) + middle + encode(ex.suffix)


def test_infill_fills_the_span_and_scores_an_oracle_perfect():
    examples = list(held_out()["infill"][:20])
    oracle = Oracle([canvas(ex) for ex in examples])
    spans = decode_infill(oracle, encode, SPECIAL, examples)
    assert [len(span) for span, _ in spans] == [ex.span for ex in examples]
    assert all(nfe == 1 for _, nfe in spans)  # every position confident at once
    scores = infill_scores(oracle, encode, decode, SPECIAL, examples)
    assert scores["exact_match"] == 1.0 and scores["forwards_per_sample"] == 1.0
    unsure = decode_infill(Oracle([canvas(ex) for ex in examples], sure=False), encode,
                           SPECIAL, examples[:3])  # one token a forward below the threshold
    assert [nfe for _, nfe in unsure] == [ex.span for ex in examples[:3]]


def test_a_random_model_fills_every_masked_position_and_nothing_else():
    from dinfer_engine.models.config import LLaDAConfig
    from dinfer_engine.models.llada import LLaDAModelLM

    torch.manual_seed(0)
    model = LLaDAModelLM(LLaDAConfig.from_dict(dict(
        model_type="llada", d_model=32, n_layers=1, n_heads=2,
        vocab_size=SPECIAL.vocab_size, mask_token_id=3, eos_token_id=1)))
    examples = list(held_out()["infill"][:6])
    for ex, (span, nfe) in zip(examples, decode_infill(model, encode, SPECIAL, examples),
                               strict=True):
        assert SPECIAL.mask not in span and len(span) == ex.span and 1 <= nfe <= ex.span


def test_repair_counts_restored_tokens_and_false_edits():
    examples = [ex for ex in eval_set(5, ("add", "rev")) if not ex.span]

    def truth(ex):
        answer = encode(ex.answer) + [SPECIAL.eos]
        return encode(ex.prompt) + answer + [SPECIAL.eos] * (24 - len(answer))

    oracle = Oracle([truth(ex) for ex in examples])

    class Loose(Oracle):  # each row gets the next row's answer
        def forward(self, ids, attention_mask=None):
            return SimpleNamespace(logits=oracle(ids).logits.roll(1, dims=0))

    scores = repair_scores(oracle, encode, SPECIAL, examples, corruptions=2)
    assert scores["repaired"] == scores["rows_fully_restored"] == 1.0
    assert scores["confident_false_edits_at_clean_positions"] == 0.0
    wrong = repair_scores(Loose([]), encode, SPECIAL, examples, corruptions=2)
    assert wrong["rows_fully_restored"] < 1.0
    assert wrong["confident_false_edits_at_clean_positions"] > 0.0
