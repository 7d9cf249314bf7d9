"""Component names and the per-architecture map: the only place in lincorr that knows module names."""

from __future__ import annotations

import dataclasses
import re
from typing import cast

import torch

from lincorr.errors import LincorrError
from lincorr.models import LM

KINDS = ("resid", "attn", "mlp", "head")
FORMS = "resid[l], attn[l], mlp[l] or head[l,h]"


@dataclasses.dataclass(frozen=True)
class Component:
    """A named place in the model: `resid[l]`, `attn[l]`, `mlp[l]` or `head[l,h]` (see the package docstring)."""

    kind: str
    layer: int
    head: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise LincorrError(f"unknown component kind '{self.kind}'; use one of {', '.join(KINDS)}")
        if (self.kind == "head") != (self.head is not None):
            raise LincorrError(f"only head components take a head index; write {FORMS}")

    def __str__(self) -> str:
        return f"head[{self.layer},{self.head}]" if self.kind == "head" else f"{self.kind}[{self.layer}]"

    @classmethod
    def parse(cls, text: str) -> Component:
        """`"mlp[3]"` -> `Component("mlp", 3)`, `"head[3,2]"` -> `Component("head", 3, 2)`."""
        match = re.fullmatch(r"\s*(resid|attn|mlp)\[(\d+)\]\s*|\s*head\[(\d+),\s*(\d+)\]\s*", text)
        if match is None:
            raise LincorrError(f"cannot read component {text!r}; write {FORMS}, e.g. mlp[3] or head[3,2]")
        if match.group(1):
            return cls(match.group(1), int(match.group(2)))
        return cls("head", int(match.group(3)), int(match.group(4)))


def resid(layer: int) -> Component:
    """The residual stream entering block `layer` (`resid[L]`: after the last block, before the final norm)."""
    return Component("resid", layer)


def attn(layer: int) -> Component:
    """Block `layer`'s attention output exactly as added to the residual: `[batch, pos, d_model]`."""
    return Component("attn", layer)


def mlp(layer: int) -> Component:
    """Block `layer`'s FFN output exactly as added to the residual: `[batch, pos, d_model]`."""
    return Component("mlp", layer)


def head(layer: int, index: int) -> Component:
    """Query head `index` of block `layer` before the output projection: `[batch, pos, head_dim]`."""
    return Component("head", layer, index)


def as_component(component: Component | str) -> Component:
    """A Component from itself or its string form."""
    return component if isinstance(component, Component) else Component.parse(component)


@dataclasses.dataclass(frozen=True)
class ArchMap:
    """Where one architecture keeps its parts. Paths are dotted module names; per-block paths are relative to a block.

    `attn` and `mlp` list the modules from the residual read to the residual write, in order: their
    parameters are the component's, and the LAST one's output (first element when it returns a tuple)
    is exactly what the block adds to the residual stream.
    """

    blocks: str  # the ModuleList of blocks, numbered 0..L-1
    embeddings: str  # the module whose output block 0 receives (resid[0])
    final_norm: str  # applied to resid[L] before the unembedding
    attn: tuple[str, ...]
    mlp: tuple[str, ...]
    o_proj: str  # its INPUT is the concatenated query heads `[batch, pos, n_heads * head_dim]`
    qkv: tuple[str, ...]  # query, key, value projections, or one fused projection (GPT-2, GPT-NeoX, Phi-3)
    # How one fused projection orders its outputs: all queries, then keys, then values (GPT-2, Phi-3), or head by
    # head, each head's query, key and value together (GPT-NeoX).
    qkv_per_head: bool = False


LLAMA_LIKE = ArchMap(
    blocks="model.layers", embeddings="model.embed_tokens", final_norm="model.norm",
    attn=("input_layernorm", "self_attn"), mlp=("post_attention_layernorm", "mlp"),
    o_proj="self_attn.o_proj", qkv=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
)
# Gemma 3 normalises each sub-layer's output before the residual add, so those norms end attn/mlp.
GEMMA3_TEXT = dataclasses.replace(
    LLAMA_LIKE,
    attn=("input_layernorm", "self_attn", "post_attention_layernorm"),
    mlp=("pre_feedforward_layernorm", "mlp", "post_feedforward_layernorm"),
)

ARCHITECTURES: dict[str, ArchMap] = {
    "llama": LLAMA_LIKE,
    "mistral": LLAMA_LIKE,
    "qwen2": LLAMA_LIKE,
    "qwen3": LLAMA_LIKE,
    "olmo": LLAMA_LIKE,  # its layer norms have no parameters
    # OLMo2 has no pre-norms: the sub-layer reads the raw residual and its output is normalised.
    "olmo2": dataclasses.replace(
        LLAMA_LIKE, attn=("self_attn", "post_attention_layernorm"), mlp=("mlp", "post_feedforward_layernorm")
    ),
    "gemma3_text": GEMMA3_TEXT,
    # Gemma3ForConditionalGeneration: the same text model one level down.
    "gemma3": dataclasses.replace(
        GEMMA3_TEXT, blocks="model.language_model.layers", embeddings="model.language_model.embed_tokens",
        final_norm="model.language_model.norm",
    ),
    "gemma2": GEMMA3_TEXT,  # the same post-norms; Gemma 2 also soft-caps its attention scores, inside self_attn
    # Phi-3 fuses query/key/value (queries, then keys, then values); its dropouts (identity in eval) are what is added.
    "phi3": dataclasses.replace(
        LLAMA_LIKE, attn=("input_layernorm", "self_attn", "resid_attn_dropout"),
        mlp=("post_attention_layernorm", "mlp", "resid_mlp_dropout"), qkv=("self_attn.qkv_proj",),
    ),
    # GPT-NeoX (Pythia): with its parallel residual (the default) the MLP reads the block's input, not the input plus
    # the attention output; both outputs are added to the stream, after dropouts that are the identity in eval.
    "gpt_neox": ArchMap(
        blocks="gpt_neox.layers", embeddings="gpt_neox.emb_dropout", final_norm="gpt_neox.final_layer_norm",
        attn=("input_layernorm", "attention", "post_attention_dropout"), mlp=("post_attention_layernorm", "mlp", "post_mlp_dropout"),
        o_proj="attention.dense", qkv=("attention.query_key_value",), qkv_per_head=True,
    ),
    # transformer.drop (identity in eval) outputs token + position embeddings, exactly what block 0 gets.
    "gpt2": ArchMap(
        blocks="transformer.h", embeddings="transformer.drop", final_norm="transformer.ln_f",
        attn=("ln_1", "attn"), mlp=("ln_2", "mlp"), o_proj="attn.c_proj", qkv=("attn.c_attn",),
    ),
}


@dataclasses.dataclass(frozen=True)
class Layout:
    """A model's modules resolved through its ArchMap, and its sizes."""

    arch: ArchMap
    model: torch.nn.Module = dataclasses.field(repr=False)
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int

    def block(self, layer: int) -> torch.nn.Module:
        return cast(torch.nn.ModuleList, self.model.get_submodule(self.arch.blocks))[layer]

    def block_path(self, layer: int, path: str) -> str:
        """Full dotted name of a per-block module."""
        return f"{self.arch.blocks}.{layer}.{path}"

    def site(self, component: Component) -> tuple[torch.nn.Module, bool]:
        """The module whose output (False) or whose input (True: heads) holds the component."""
        if component.kind == "resid":
            if component.layer == 0:
                return self.model.get_submodule(self.arch.embeddings), False
            return self.block(component.layer - 1), False
        if component.kind == "head":
            return self.block(component.layer).get_submodule(self.arch.o_proj), True
        modules = self.arch.attn if component.kind == "attn" else self.arch.mlp
        return self.block(component.layer).get_submodule(modules[-1]), False

    def final_norm(self) -> torch.nn.Module:
        return self.model.get_submodule(self.arch.final_norm)


def layout(lm: LM) -> Layout:
    """Resolve `lm`'s architecture; an unmapped `config.model_type` raises LincorrError."""
    model_type = lm.model.config.model_type
    if model_type not in ARCHITECTURES:
        raise LincorrError(
            f"lincorr.internals has no module map for model type '{model_type}' (supported: {', '.join(sorted(ARCHITECTURES))}); "
            f"add an ArchMap to lincorr.internals.arch.ARCHITECTURES with blocks, embeddings, final_norm, attn, mlp, o_proj and qkv"
        )
    arch = ARCHITECTURES[model_type]
    text = lm.model.config.get_text_config()
    n_heads = text.num_attention_heads
    blocks = cast(torch.nn.ModuleList, lm.model.get_submodule(arch.blocks))
    o_proj = blocks[0].get_submodule(arch.o_proj)
    return Layout(
        arch=arch,
        model=lm.model,
        n_layers=len(blocks),
        n_heads=n_heads,
        n_kv_heads=getattr(text, "num_key_value_heads", None) or n_heads,
        head_dim=o_proj.weight.shape[in_axis(o_proj)] // n_heads,  # type: ignore[index]  # torch types a module's weight as Tensor | Module
        d_model=text.hidden_size,
    )


def in_axis(module: torch.nn.Module) -> int:
    """The weight axis that meets the input: nn.Linear stores `[out, in]`, GPT-2's Conv1D `[in, out]`."""
    return 1 if isinstance(module, torch.nn.Linear) else 0


def check_component(parts: Layout, component: Component) -> None:
    """Raise LincorrError when a layer or head index is outside the model."""
    top = parts.n_layers if component.kind == "resid" else parts.n_layers - 1
    if not 0 <= component.layer <= top:
        raise LincorrError(f"{component}: layer must be in 0..{top} for {component.kind} of this {parts.n_layers}-block model")
    if component.head is not None and not 0 <= component.head < parts.n_heads:  # a head component
        raise LincorrError(f"{component}: head must be in 0..{parts.n_heads - 1} (this model has {parts.n_heads} query heads)")


def list_components(lm: LM, kinds: tuple[str, ...] = KINDS) -> list[Component]:
    """Every component of the given kinds, in block order (resid[L] last)."""
    parts = layout(lm)
    out = []
    for layer in range(parts.n_layers + 1):
        if "resid" in kinds:
            out.append(resid(layer))
        if layer == parts.n_layers:
            break
        if "attn" in kinds:
            out.append(attn(layer))
        if "head" in kinds:
            out += [head(layer, h) for h in range(parts.n_heads)]
        if "mlp" in kinds:
            out.append(mlp(layer))
    return out


def component_parameters(lm: LM, component: Component | str) -> dict[str, torch.nn.Parameter]:
    """The parameters that compute a component, keyed by their names in `lm.model.named_parameters()`.

    - `attn[l]` / `mlp[l]`: every parameter on the path from the residual read to the residual write
      (pre-norm, sub-layer, post-norm where the architecture has one). Over a block, attn and mlp
      parameters partition the block's parameters.
    - `head[l,h]`: the parameters that hold head h's slices (see `head_indices` for which rows or
      columns): query rows of head h, key and value rows of its key/value head (shared by the
      `n_heads / n_kv_heads` query heads of its group), biases alike, and the output-projection
      columns that read head h. The output-projection bias and query/key norms are not per head
      (Gemma 3 and Qwen3 share theirs across heads; OLMo2 normalises all heads together).
    - `resid[l]` has no parameters of its own: LincorrError.
    """
    component = as_component(component)
    parts = layout(lm)
    check_component(parts, component)
    if component.kind == "resid":
        raise LincorrError(f"{component} is a sum of components and has no parameters; ask for attn[l], mlp[l] or head[l,h]")
    if component.kind == "head":
        paths = parts.arch.qkv + (parts.arch.o_proj,)
        return {
            name: parameter
            for path in paths
            for name, parameter in named_parameters(parts, component.layer, path)
            if not (path == parts.arch.o_proj and name.endswith(".bias"))
        }
    paths = parts.arch.attn if component.kind == "attn" else parts.arch.mlp
    return {name: parameter for path in paths for name, parameter in named_parameters(parts, component.layer, path)}


def named_parameters(parts: Layout, layer: int, path: str):
    """(full name, parameter) pairs of one per-block module."""
    module = parts.block(layer).get_submodule(path)
    return [(f"{parts.block_path(layer, path)}.{name}", p) for name, p in module.named_parameters()]


def head_indices(lm: LM, component: Component | str) -> dict[str, tuple[int, torch.Tensor]]:
    """For each parameter of `component_parameters(lm, head[l,h])`: `(axis, indices)` of head h's entries.

    `parameter.index_select(axis, indices)` is head h's part (for a weight delta), `index_copy_`
    grafts it, and a gradient mask built from it freezes it. Query/key/value rows (nn.Linear axis 0;
    GPT-2's fused Conv1D axis 1, query block then key block then value block; GPT-NeoX's fused rows
    head by head) and the output
    projection's input columns (nn.Linear axis 1, Conv1D axis 0).
    """
    component = as_component(component)
    parts = layout(lm)
    check_component(parts, component)
    if component.head is None:  # not a head component
        raise LincorrError(f"{component} is not a head; head_indices takes head[l,h]")
    width = parts.head_dim
    group = component.head // (parts.n_heads // parts.n_kv_heads)
    q_rows = torch.arange(component.head * width, (component.head + 1) * width)
    kv_rows = torch.arange(group * width, (group + 1) * width)
    if parts.arch.qkv_per_head:  # every head has its own key/value head here
        per_path = {parts.arch.qkv[0]: torch.arange(3 * component.head * width, 3 * (component.head + 1) * width)}
    elif len(parts.arch.qkv) == 1:
        q_size, kv_size = parts.n_heads * width, parts.n_kv_heads * width
        per_path = {parts.arch.qkv[0]: torch.cat([q_rows, q_size + kv_rows, q_size + kv_size + kv_rows])}
    else:
        per_path = dict(zip(parts.arch.qkv, (q_rows, kv_rows, kv_rows)))
    out = {}
    for path, rows in per_path.items():
        module = parts.block(component.layer).get_submodule(path)
        for name, _ in named_parameters(parts, component.layer, path):
            out[name] = (0 if name.endswith(".bias") else 1 - in_axis(module), rows)
    o_proj = parts.block(component.layer).get_submodule(parts.arch.o_proj)
    out[f"{parts.block_path(component.layer, parts.arch.o_proj)}.weight"] = (in_axis(o_proj), q_rows)
    return out
