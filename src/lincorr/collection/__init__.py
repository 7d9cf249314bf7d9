"""Collecting logit tables: `collect(lm, prompts, inputs, settings)`, batched, checked, cached on disk and shared across ranks.

`settings.py` is the one settings type (`CollectSettings`), `forward.py` the forward pass and
the head check, `pieces.py` the unit of resume and of work shared under torchrun, `tables.py`
the tables and the entry point; the store they are kept in is `lincorr.cache.TableStore`.
"""

from lincorr.collection.pieces import serve_collection
from lincorr.collection.settings import UNCACHED, CollectSettings
from lincorr.collection.tables import LogitTable, collect, entity_logits

__all__ = ["CollectSettings", "UNCACHED", "LogitTable", "collect", "entity_logits", "serve_collection"]
