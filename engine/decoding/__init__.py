"""Choosing the tokens each iteration commits: decoders, the strategies, the prediction."""
