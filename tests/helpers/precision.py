"""Tolerances for comparing float32 results that were computed two different ways.

Two float32 computations of one quantity by different code paths (batched or one prompt at a time, another kernel,
another CPU's vector instructions) agree only to within their rounding, and which way each rounds differs between
machines. A sum of n float32 terms is off by at most about n·eps·Σ|terms| (recursive summation; Higham, "Accuracy
and Stability of Numerical Algorithms", §3.1), so two such sums differ by at most twice that. Tests that compare two
float32 computations allow that much and no less; bit-identity is asserted only between runs of one code path on
one machine (cached against uncached, one process against torchrun).
"""

from __future__ import annotations

import numpy as np

FLOAT32_EPS = float(np.finfo(np.float32).eps)  # 1.19e-7
# A logit or hidden state of the tests' tiny models (2 blocks, hidden 32, FFN 64, at most 64 positions) is a chain of
# sums: per block an attention score (8 to 32 terms), a softmax over at most 64 positions, a weighted sum of values
# (64), the output projection (32), the FFN's two projections (32 and 64), two norms (32 each); then the head (32).
# That is under 512 accumulated roundings; the intermediate terms are within a small factor of the result's size
# (weights are N(0, 0.02) and every block is normalised), so 1024 roundings of the result's size bound the error.
TINY_FORWARD_ROUNDINGS = 1024


def float32_atol(magnitude: float, roundings: int) -> float:
    """Largest difference between two float32 computations of values of size `magnitude` that each accumulate `roundings` roundings."""
    return 2.0 * roundings * FLOAT32_EPS * float(magnitude)


def tiny_forward_atol(*values) -> float:
    """Tolerance for outputs of a tiny model's forward pass (logits, hidden states, their differences) computed two ways."""
    magnitude = max(float(np.max(np.abs(np.asarray(v, np.float64)))) for v in values)
    return float32_atol(max(magnitude, 1.0), TINY_FORWARD_ROUNDINGS)


def correlation_atol(rows: np.ndarray, atol: float) -> np.ndarray:
    """Per row, how far Pearson r against any other row can move when this row's entries move by up to `atol` each.

    With u the centred row, r = <u, v>/(|u||v|) changes by at most 2|δ|/|u| for a perturbation δ of u (the gradient of
    r in u has norm at most 1/|u|, and centring the perturbation does not lengthen it); |δ| ≤ sqrt(k)·atol. Rows that
    are nearly constant amplify a rounding difference most, which is why a fixed tolerance fails on some machines.
    """
    rows = np.asarray(rows, np.float64)
    centred = rows - rows.mean(axis=1, keepdims=True)
    return 2.0 * np.sqrt(rows.shape[1]) * atol / np.linalg.norm(centred, axis=1)
