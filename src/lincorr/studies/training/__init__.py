"""Training studies (Peng et al. §4-6): gradient correlation, generalization vs hallucination, subwords, the vocabulary ablation."""
