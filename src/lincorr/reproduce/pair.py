"""The second checkpoint of a reproduction (`--eval-model`): the same model after post-training, which the resilience
claims (`eval_model: true` in the paper's claims) read beside the model the reproduction runs on."""

from __future__ import annotations

from lincorr.models import LM
from lincorr.reproduce.step import Context, NotApplicable

# The key of the second checkpoint in `Context.shared`: loaded once, read by every claim that needs it.
EVAL_LM = "eval_lm"
NEEDS_EVAL_MODEL = "needs a second checkpoint of this model with its tokenizer (the paper: base -> instruct); pass --eval-model"


def eval_lm(ctx: Context) -> LM:
    """The checkpoint the claim's W, fitted on `ctx.lm`, is evaluated on."""
    lm = ctx.shared.get(EVAL_LM)
    if lm is None:
        raise NotApplicable(NEEDS_EVAL_MODEL)
    return lm
