"""Linear correlation between prompts' logits (Peng et al. §3): matrices, W precision, case tables, resilience, scale."""
