"""Feng et al. (2025), extractive structures: the steps behind its claims (claims.yaml beside them)."""
