"""What an edit does: the edit taught by fine-tuning a copy of the model, then each of its queries asked again.

The paper's training by default (AdamW at 5e-6 over every parameter, until the new object is the fact prompt's top-1
in its domain, at most `PAPER_EDIT.epochs` steps of the one sentence); FT-L style training (the MLP weights of a few
blocks, a larger rate) as the `constrained` option. The caller's model is never changed: each edit starts from it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

from lincorr.domains import Domain
from lincorr.finetune import Fact, TrainConfig, train_on_facts
from lincorr.models import LM
from lincorr.ripple.hops import FIRST_HOP, Hop
from lincorr.ripple.benchmark import GRADSIM_EDITED
from lincorr.ripple.predictors import answer_scores, grad_sims

# Peng et al. train with AdamW at 5e-6 and say nothing of epochs: until the fact is learned, capped at 50 steps of the one
# sentence (as lincorr's paper preset caps its runs).
PAPER_EDIT = TrainConfig(learning_rate=5e-6, epochs=50, batch_size=1)
# FT-L (Zhu et al.; Meng et al.'s baseline): the MLP weights of a few middle blocks, a larger rate, fewer steps.
CONSTRAINED_EDIT = TrainConfig(learning_rate=5e-4, epochs=25, batch_size=1, trainable=(r"\.mlp\.",))
EDIT_TRAINING = {"paper": PAPER_EDIT, "constrained": CONSTRAINED_EDIT}


def constrained_layers(lm: LM, config: TrainConfig) -> TrainConfig:
    """FT-L's blocks: the middle three of the model's, where editing methods find facts stored."""
    blocks = lm.model.config.num_hidden_layers
    start = max(blocks // 2 - 1, 0)
    return dataclasses.replace(config, layers=(start, min(start + 3, blocks)))


def learned(lm: LM, hop: Hop, domain: Domain):
    """A `stop_when` for training: True once the hop's new object is its fact prompt's top-1 in its domain."""
    def check(model) -> bool:
        probe = LM(f"{lm.name}+edit", model, lm.tokenizer, fingerprint="in-training", head_verified=lm.head_verified)
        return answer_scores(probe, hop.fact_template, domain, hop.subject, hop.new_object)[1] == 1

    return check


def edit_outcomes(lm: LM, hops: Sequence[Hop], held_answers: Sequence[str], domains: Mapping[str, Domain],
                  config: TrainConfig) -> dict:
    """Teach the hops' edit to a copy of the model, then ask each hop's query again: the implied answer's log-probability
    and rank within the domain after the edit, the same of the answer the model gave before it (`held_answers`: does the
    old implication give way?), GradSim read on the edited model as its authors read it, and whether the edit itself was
    learned (new object top-1) and in how many steps."""
    edit = hops[0]
    stop = learned(lm, edit, domains[FIRST_HOP])
    fact = Fact(edit.fact_template.replace("{}", edit.subject), edit.new_object)
    trained = train_on_facts(lm.model, lm.tokenizer, [fact], config, stop_when=stop)
    edited = LM(f"{lm.name}+edit", trained.model, lm.tokenizer, fingerprint="edited", head_verified=lm.head_verified)
    after = []
    for hop, held in zip(hops, held_answers):
        logprob, rank = answer_scores(edited, hop.query_template, domains[hop.relation], hop.subject, hop.answer)
        held_logprob, held_rank = answer_scores(edited, hop.query_template, domains[hop.relation], hop.subject, held)
        after.append({"logprob_after": logprob, "rank_after": rank, "held_logprob_after": held_logprob, "held_rank_after": held_rank})
    clock = time.perf_counter()
    for row, similarity in zip(after, grad_sims(edited, hops)):
        row[GRADSIM_EDITED] = similarity
    return {"learned": stop(trained.model), "steps": trained.steps, "train_seconds": trained.seconds, "after": after,
            "edited_gradsim_seconds": time.perf_counter() - clock}
