"""Reproducing a paper claim by claim (`lincorr reproduce`): claims as data, steps that measure them, tests that judge them."""

from lincorr.reproduce.claims import BUDGETS, Claim, Paper, load_paper
from lincorr.reproduce.runner import ClaimResult, ReproductionResult, reproduce

__all__ = ["BUDGETS", "Claim", "ClaimResult", "Paper", "ReproductionResult", "load_paper", "reproduce"]
