"""Named model components for every supported architecture: capture, patch, ablate, differentiate, logit lens.

Convention (shapes TransformerLens style; L blocks, numbered 0..L-1 as in the HF module list):

- `resid[0]`: the embeddings exactly as the model feeds them to block 0 (Gemma's sqrt(d_model)
  scaling and GPT-2's position embeddings included), `[batch, pos, d_model]`.
- `resid[l+1]`: the residual stream after block l; `resid[L]` is the last hidden state BEFORE
  the final norm.
- `attn[l]`, `mlp[l]`: block l's attention and FFN outputs exactly as added to the residual,
  `[batch, pos, d_model]`. Where the architecture normalises a sub-layer's output before the add
  (Gemma 2 and 3, OLMo2) that norm is part of the component, so always
  `resid[l+1] = resid[l] + attn[l] + mlp[l]`.
- `head[l,h]`: query head h of block l before the output projection, `[batch, pos, head_dim]`
  (grouped-query attention: heads are query heads; several share one key/value head).

Components are `Component(kind, layer, head=None)`, made by `resid(l)`, `attn(l)`, `mlp(l)`,
`head(l, h)` or parsed from "mlp[3]" / "head[3,2]"; every function also takes the string.
`arch.ARCHITECTURES` maps each HF `config.model_type` to its module names.
"""

from lincorr.internals.arch import (
    ARCHITECTURES,
    ArchMap,
    Component,
    attn,
    component_parameters,
    head,
    head_indices,
    layout,
    list_components,
    mlp,
    resid,
)
from lincorr.internals.lens import decode, hidden_ranks, logit_lens, token_ranks
from lincorr.internals.trace import Ablate, Patch, Trace, mean_activation, run, special_ids

__all__ = [
    "ARCHITECTURES", "Ablate", "ArchMap", "Component", "Patch", "Trace", "attn", "component_parameters", "decode",
    "head", "head_indices", "hidden_ranks", "layout", "list_components", "logit_lens", "mean_activation", "mlp", "resid", "run",
    "special_ids", "token_ranks",
]
