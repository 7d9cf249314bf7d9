"""The studies, one sub-package per system: each composes the core stages and returns a result that saves, prints and reloads itself."""
