"""A model that transformers cannot load, said as one line: what its files or `--model-kwargs` hold that it refused."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from lincorr.errors import LincorrError, ModelError, UsageError


@contextlib.contextmanager
def model_load_errors(name: str, model_kwargs: dict | None = None):
    """What transformers and safetensors raise for a damaged model directory (weights, config, tokenizer) or for keyword
    arguments from_pretrained does not take, as one line (a ModelError, or a UsageError naming --model-kwargs)."""
    from safetensors import SafetensorError

    from lincorr.cli import out_of_memory

    try:
        yield
    except LincorrError:
        raise
    except Exception as error:
        if isinstance(error, OSError) and error.errno is not None:
            raise  # the system's (a full disk, a permission): the command's own handler says so
        # A config.json transformers cannot build a model from ends in whatever its code meets first (a ZeroDivisionError
        # for 0 heads, a RuntimeError for a negative size, a KeyError for an unknown rope type, huggingface_hub's
        # validation errors); raised in lincorr's own code, such an error is a bug and keeps its traceback.
        expected = isinstance(error, (OSError, ValueError, TypeError, AttributeError, SafetensorError))
        if out_of_memory(error) or not (expected or raised_outside_lincorr(error)):
            raise
        cause = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
        if model_kwargs:
            raise UsageError(f"the model {name} did not load with --model-kwargs {json.dumps(model_kwargs)} ({cause}); "
                             "check those arguments against from_pretrained's") from None
        raise ModelError(f"the model {name} did not load ({cause}); check its files (config.json, the weights, "
                         "tokenizer.json) or convert it again") from None


def raised_outside_lincorr(error: BaseException) -> bool:
    """Whether the innermost frame of `error`'s traceback is another package's code (transformers', torch's)."""
    import lincorr

    trace = error.__traceback__
    while trace is not None and trace.tb_next is not None:
        trace = trace.tb_next
    return trace is not None and Path(lincorr.__file__).parent not in Path(trace.tb_frame.f_code.co_filename).parents
