"""Studies built from collect, fit and metrics: one module per study, each returning a result dataclass."""
