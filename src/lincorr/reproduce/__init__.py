"""Reproducing a paper claim by claim (`lincorr reproduce`): claims as data, steps that measure them, tests that judge them."""

from lincorr.reproduce.claims import BUDGETS, Claim, Paper, known_papers, load_paper
from lincorr.reproduce.runner import ClaimResult, ReproductionResult, claims_to_run, reproduce

__all__ = ["BUDGETS", "Claim", "ClaimResult", "Paper", "ReproductionResult", "claims_to_run", "known_papers", "load_paper", "reproduce"]
