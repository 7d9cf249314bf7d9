"""Vector arithmetic (Merullo et al.): the logit lens, o-vectors, FFN ablation, and ours, o-vectors against W."""
