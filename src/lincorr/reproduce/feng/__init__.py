"""Feng et al. (2024), extractive structures: the steps behind its claims (claims.yaml beside them)."""
