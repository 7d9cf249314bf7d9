"""What each predictor says of a query before its edit is made: the answer's prior, W, GradSim and CLaRE-style similarity.

- **prior**: the implied answer's log-probability within its domain under the two-hop query, before the edit (and the
  condition query's rank of it: whether the model knows the second hop).
- **W** (Peng et al.): the map between the edit's fact prompt and the query, fitted over vocabulary inputs with
  lincorr's collection and fit; the predictor is W[new object, implied answer], and the answer's rank in that row.
- **GradSim** (Qin et al.): the cosine between the gradients of the cross-entropy on the edit's answer tokens and on the
  query's answer tokens, over every parameter (the MLP weights alone past `ALL_PARAMETERS_UP_TO`).
- **CLaRE-style** (after Baser et al.): the cosine of the edit sentence's and the query sentence's hidden states at their
  last token, at every layer; the layer is chosen later, on other edits than those it scores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from lincorr.collection import CollectSettings, entity_logits
from lincorr.domains import Domain
from lincorr.finetune import IGNORE_INDEX, Fact, collate, encode_fact
from lincorr.fit import FitConfig, measure_pair
from lincorr.inputs import sample_vocab_inputs
from lincorr.models import LM, apply_logit_transform
from lincorr.prompts import Prompt
from lincorr.ripple.hops import FIRST_HOP, Hop

# Past half a billion parameters two full-model gradients in float32 outgrow a laptop's memory; the MLP weights stay.
ALL_PARAMETERS_UP_TO = 600_000_000
# The paper's W (ols) and lincorr's default (ridge with a cross-validated penalty), each a predictor of its own.
W_FITS = {"W (ols, the paper's)": FitConfig(estimator="ols", n_boot=20, n_control=1),
          "W (ridge)": FitConfig(estimator="ridge", alpha="cv", n_boot=20, n_control=1)}


def domain_prompt(template: str, domain: Domain) -> Prompt:
    return Prompt(template, template, domain)


def domain_logprobs(lm: LM, template: str, domain: Domain, entity: str) -> np.ndarray:
    """Log-probabilities within `domain` after the template filled with `entity`: `[n_domain]`, float64."""
    logits = entity_logits(lm, domain_prompt(template, domain), [entity])[0].astype(np.float64)
    return logits - np.logaddexp.reduce(logits)


def answer_scores(lm: LM, template: str, domain: Domain, entity: str, answer: str) -> tuple[float, int]:
    """The answer's log-probability within `domain` after the template filled with `entity`, and its rank there (1: top)."""
    logprobs = domain_logprobs(lm, template, domain, entity)
    column = domain.index(answer)
    return float(logprobs[column]), int((logprobs > logprobs[column]).sum()) + 1


def prior(lm: LM, hop: Hop, domains: Mapping[str, Domain]) -> dict:
    """Before the edit: the implied answer under the query, the model's own answer to the query (the implication the
    edit should end), and the implied answer's rank under the condition query (the second hop alone)."""
    domain = domains[hop.relation]
    logprobs = domain_logprobs(lm, hop.query_template, domain, hop.subject)
    column = domain.index(hop.answer)
    _, condition_rank = answer_scores(lm, hop.condition_template, domain, hop.new_object, hop.answer)
    return {"prior": float(logprobs[column]), "rank_before": int((logprobs > logprobs[column]).sum()) + 1,
            "condition_rank": condition_rank, "held_answer": domain.words[int(np.argmax(logprobs))],
            "held_logprob": float(logprobs.max())}


def w_predictions(lm: LM, hops: Sequence[Hop], domains: Mapping[str, Domain], n_inputs: int, seed: int = 0,
                  settings: CollectSettings = CollectSettings()) -> tuple[list[dict], list[dict]]:
    """Each hop's W[new object, answer] and the answer's rank in that row, for every fit of `W_FITS`; and each fitted
    pair's held-out label-wise r (how well W maps the two prompts' logits on inputs it was not fitted on)."""
    inputs = sample_vocab_inputs(lm.tokenizer, n_inputs, seed=seed)
    scores: list[dict] = [{} for _ in hops]
    fits: list[dict] = []
    for pair in dict.fromkeys((hop.pair, hop.relation) for hop in hops):
        (fact_template, query_template), relation = pair
        source, target = domain_prompt(fact_template, domains[FIRST_HOP]), domain_prompt(query_template, domains[relation])
        for name, config in W_FITS.items():
            result = measure_pair(lm, source, target, inputs, dataclasses.replace(config, seed=seed), settings=settings)
            fits.append({"predictor": name, "fact": fact_template, "query": query_template,
                         "labelwise_r_mean": float(np.nanmean(result.labelwise_r))})
            for index, hop in enumerate(hops):
                if (hop.pair, hop.relation) == pair:
                    row = result.W[source.domain.index(hop.new_object)]
                    value = row[target.domain.index(hop.answer)]
                    scores[index][name] = float(value)
                    scores[index][f"{name} rank"] = int((row > value).sum()) + 1
    return scores, fits


def answer_loss(lm: LM, prompt: str, answer: str) -> torch.Tensor:
    """Mean cross-entropy of the answer's tokens after `prompt`, a scalar tensor with its graph; only the positions that
    predict an answer token go through the head (with a 262k vocabulary the full head would be most of the cost)."""
    batch = collate([encode_fact(lm.tokenizer, Fact(prompt, answer))], lm.tokenizer.pad_token_id).to(lm.device)
    hidden = lm.model.base_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids,
                                 use_cache=False).last_hidden_state
    predicts_answer = batch.labels[:, 1:] != IGNORE_INDEX  # position p predicts token p + 1
    logits = apply_logit_transform(lm.model.get_output_embeddings()(hidden[:, :-1][predicts_answer]), lm.model.config)
    return torch.nn.functional.cross_entropy(logits.float(), batch.labels[:, 1:][predicts_answer])


def gradient_parameters(lm: LM) -> tuple[str, list[torch.nn.Parameter]]:
    """Which parameters GradSim differentiates, in words, and the parameters themselves."""
    named = list(lm.model.named_parameters())
    if sum(parameter.numel() for _, parameter in named) <= ALL_PARAMETERS_UP_TO:
        return "all parameters", [parameter for _, parameter in named]
    return "the MLP weights", [parameter for name, parameter in named if ".mlp." in name]


def gradient(lm: LM, prompt: str, answer: str, parameters: Sequence[torch.nn.Parameter]) -> list[torch.Tensor]:
    """The gradient of `answer_loss` with respect to each of `parameters` (None-free: an unused one gives zeros), in
    eval mode (no dropout), the parameters' own `requires_grad` restored after."""
    saved = [parameter.requires_grad for parameter in parameters]
    was_training = lm.model.training
    lm.model.eval()
    try:
        with torch.enable_grad():
            for parameter in parameters:
                parameter.requires_grad_(True)
            grads = torch.autograd.grad(answer_loss(lm, prompt, answer), list(parameters), allow_unused=True)
    finally:
        for parameter, flag in zip(parameters, saved):
            parameter.requires_grad_(flag)
        lm.model.train(was_training)
    return [torch.zeros_like(p) if g is None else g.detach().float() for p, g in zip(parameters, grads)]


def cosine(left: Sequence[torch.Tensor], right: Sequence[torch.Tensor]) -> float:
    """The cosine between two vectors given as lists of pieces: each piece's dot product in its own dtype, summed in float64."""
    dot = sum(float(torch.vdot(a.reshape(-1), b.reshape(-1))) for a, b in zip(left, right))
    norms = [sum(float(torch.vdot(piece.reshape(-1), piece.reshape(-1))) for piece in side) ** 0.5 for side in (left, right)]
    return dot / (norms[0] * norms[1]) if norms[0] > 0 and norms[1] > 0 else float("nan")


def edit_sentence(hop: Hop) -> tuple[str, str]:
    """The edit's fact prompt about its subject, and the new object that follows it."""
    return hop.fact_template.replace("{}", hop.subject), hop.new_object


def query_sentence(hop: Hop) -> tuple[str, str]:
    """The two-hop query about the edit's subject, and the answer it implies once the edit holds."""
    return hop.query_template.replace("{}", hop.subject), hop.answer


def grad_sims(lm: LM, hops: Sequence[Hop]) -> list[float]:
    """GradSim of one edit (the hops' shared fact and new object) with each of its hops' queries."""
    _, parameters = gradient_parameters(lm)
    edit = gradient(lm, *edit_sentence(hops[0]), parameters)
    return [cosine(edit, gradient(lm, *query_sentence(hop), parameters)) for hop in hops]


@torch.no_grad()
def last_token_states(lm: LM, text: str) -> torch.Tensor:
    """The hidden state after every block (the embeddings first) at the text's last token: `[n_layers + 1, d_model]`."""
    ids = torch.tensor([lm.tokenizer(text)["input_ids"]], device=lm.device)
    states = lm.model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    return torch.stack([state[0, -1].double() for state in states])


def clare_similarities(lm: LM, hops: Sequence[Hop]) -> list[list[float]]:
    """The cosine of the edit sentence's and each query sentence's last-token states, layer by layer."""
    edit = last_token_states(lm, " ".join(edit_sentence(hops[0])))
    rows = []
    for hop in hops:
        query = last_token_states(lm, " ".join(query_sentence(hop)))
        rows.append(torch.nn.functional.cosine_similarity(edit, query, dim=-1).tolist())
    return rows


