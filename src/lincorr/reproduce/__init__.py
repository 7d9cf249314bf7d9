"""Reproducing a paper claim by claim (`lincorr reproduce`): claims as data, steps that measure them, tests that judge them.

The claims load without the runner, which imports every step (torch and the studies): `lincorr reproduce peng --list`
needs only them.
"""

from typing import TYPE_CHECKING

from lincorr.reproduce.claims import BUDGETS, Claim, Paper, known_papers, load_paper

if TYPE_CHECKING:
    from lincorr.reproduce.runner import ClaimResult, ReproductionResult, claims_to_run, reproduce

__all__ = ["BUDGETS", "Claim", "ClaimResult", "Paper", "ReproductionResult", "claims_to_run", "known_papers", "load_paper", "reproduce"]
RUNNER_NAMES = ("ClaimResult", "ReproductionResult", "claims_to_run", "reproduce")


def __getattr__(name: str):
    if name in RUNNER_NAMES:
        from lincorr.reproduce import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'lincorr.reproduce' has no attribute '{name}'")
