"""Extractive structures (Feng et al.): two-hop data and OCR, extractive scores, freezing, data ordering and grafting."""
