"""Structured outputs: constraints on what a row may commit (docs/structured-outputs.md).

`spec` (torch-free: the service checks specs at submit) says what an answer must match
and turns it into an llguidance grammar; `grammar` readies it over the model's
vocabulary (`vocabulary`); `witness` keeps each constrained row's block completable,
which the constrained decoder (dinfer_engine/decoding/constrained.py) commits from."""
