"""Merullo et al. (2024), vector arithmetic: the steps behind its claims (claims.yaml beside them)."""
