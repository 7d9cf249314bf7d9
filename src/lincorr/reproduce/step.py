"""What a step of a reproduction gets and gives: the model and its settings in, the numbers and the test out."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lincorr import recording
from lincorr.collection import CollectSettings
from lincorr.errors import LincorrError
from lincorr.inputs import sample_vocab_inputs
from lincorr.knowledge import Registry
from lincorr.models import LM
from lincorr.reproduce.verdicts import Test

# Every claim samples its vocabulary inputs with this seed, so claims at one N share inputs, and with them
# every logit table (a table's cache key holds its inputs).
INPUT_SEED = 0


class NotApplicable(LincorrError):
    """A step that cannot run on this model (a prompt it cannot tokenize, a second checkpoint it does not have), with why."""


@dataclasses.dataclass(frozen=True)
class Context:
    """A step's model, registry and settings (those of the claim at the chosen budget)."""

    lm: LM
    registry: Registry
    settings: Mapping[str, Any]  # the claim's YAML: its values are whatever the file holds
    collect: CollectSettings = CollectSettings()  # how the logit-table studies collect
    # What several claims of one reproduction compute once (a training run), with the record of the code that made it.
    shared: dict = dataclasses.field(default_factory=recording.SharedWork)
    interest: float | None = None  # the effect the claim is judged against, in its test's units (`Claim.interest`)

    def inputs(self, n: int | None = None) -> list[str]:
        """N vocabulary inputs (the settings' n_inputs by default), the same list for every claim at that N."""
        return sample_vocab_inputs(self.lm.tokenizer, int(n or self.settings["n_inputs"]), INPUT_SEED)

    def chosen(self, labels_of: Mapping[str, object]) -> list:
        """The values of `labels_of` whose label the settings' `relations` names (all when it names none), in its order."""
        wanted = self.settings.get("relations")
        if not wanted:
            return list(labels_of.values())
        missing = [label for label in wanted if label not in labels_of]
        if missing:
            raise LincorrError(f"the claim names relations the paper's table lacks: {', '.join(missing)}")
        return [labels_of[label] for label in wanted]


@dataclasses.dataclass(frozen=True)
class Measured:
    """What a step found: our numbers (small JSON, no arrays), one line of them, the test the paper's way and lincorr's beside it.

    `test` None means the numbers were measured but nothing can judge them here; `reason` says why.
    """

    ours: dict
    text: str
    test: Test | None
    variant: Test | None = None
    reason: str = ""
