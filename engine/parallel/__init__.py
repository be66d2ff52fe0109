"""Tensor- and expert-parallel replicas: one model spread over N ranks (docs/adr/011)."""
