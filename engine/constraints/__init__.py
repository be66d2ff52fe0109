"""Structured outputs: constraints on what a row may commit (docs/structured-outputs.md).

`spec` (torch-free: the service checks specs at submit) says what an answer must match;
`automaton` compiles it over the model's vocabulary; `block_dp` finds a block's most
probable accepted completion, which the constrained decoder (engine/decoding/constrained.py)
commits."""
