"""Peng et al. (2025), linear correlation: the steps behind its claims (claims.yaml beside them)."""
