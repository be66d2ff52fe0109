"""Choosing the tokens each iteration commits: decoders (the constrained one wrapping the
others), the strategies, the prediction."""
