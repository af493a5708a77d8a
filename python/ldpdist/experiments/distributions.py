"""The distributions of the experiments (``--dist``): ``geo:λ``, ``unif:s``, ``zipf:a`` or a
``.npy`` file; see :mod:`ldpdist.experiments`."""

from __future__ import annotations

import math
import os
from typing import Any, Tuple

import numpy as np

from ..deploy import NPY_ERRORS, npy_error

def _float_param(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"bad {what} parameter {text!r} (expected a number)") from None
    if not math.isfinite(value):
        raise ValueError(f"bad {what} parameter {text!r} (expected a finite number)")
    return value


def parse_distribution(spec: str) -> Tuple[str, Any]:
    """Validate a ``--dist`` spec; returns (kind, parameter). For a .npy file the parameter
    is the loaded, checked array."""
    spec = str(spec).strip()
    if spec.lower().endswith(".npy"):
        return "file", load_distribution(spec)
    kind, sep, param = spec.partition(":")
    kind = kind.lower()
    if not sep or kind not in ("geo", "unif", "zipf"):
        raise ValueError(f"unknown distribution {spec!r} (expected geo:LAMBDA, unif:S, "
                         "zipf:A or a path to a .npy file)")
    if kind == "geo":
        lam = _float_param(param, "geo")
        if not 0 < lam < 1:
            raise ValueError(f"geo:LAMBDA needs 0 < LAMBDA < 1, got {param}")
        return kind, lam
    if kind == "zipf":
        a = _float_param(param, "zipf")
        if a <= 0:
            raise ValueError(f"zipf:A needs A > 0, got {param}")
        return kind, a
    try:
        s = int(param)
    except ValueError:
        raise ValueError(f"unif:S needs an integer support size, got {param!r}") from None
    if s < 1:
        raise ValueError(f"unif:S needs S >= 1, got {s}")
    return kind, s


def load_distribution(path: str) -> np.ndarray:
    """A .npy distribution: 1-D, float, finite, nonnegative, summing to 1 within 1e-9."""
    try:
        array = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ValueError(f"distribution file {path!r} not found") from None
    except NPY_ERRORS as exc:  # numpy's header parser lets tokenize's and int()'s through
        raise ValueError(f"cannot read distribution file {path!r}: {npy_error(exc)}") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        raise ValueError(f"{path}: a distribution must be a float array, got dtype "
                         f"{getattr(array, 'dtype', type(array).__name__)}")
    if array.ndim != 1 or array.size < 2:
        raise ValueError(f"{path}: a distribution must be 1-D with at least 2 entries, got "
                         f"shape {array.shape}")
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        raise ValueError(f"{path}: the distribution has non-finite entries")
    if (array < 0).any():
        i = int(np.argmax(array < 0))
        raise ValueError(f"{path}: the distribution has negative entries (p[{i}] = {array[i]})")
    total = float(array.sum())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"{path}: the distribution sums to {total!r}, not 1 (within 1e-9)")
    return array


def distribution_label(spec: str) -> str:
    """The name plots and tables give a ``--dist`` spec: ``geo:0.8`` → ``Geo(0.8)``,
    ``unif:10`` → ``Unif(10)``, a file → its base name."""
    kind, param = parse_distribution(spec)
    if kind == "file":
        return os.path.basename(spec)
    name = {"geo": "Geo", "unif": "Unif", "zipf": "Zipf"}[kind]
    return f"{name}({param:g})" if kind != "unif" else f"Unif({param})"


def make_distribution(spec: str, k: int, rng: np.random.Generator) -> np.ndarray:
    """The probability vector of ``spec`` over [0, k), placed with ``rng`` (see the module
    docstring)."""
    kind, param = parse_distribution(spec)
    if kind == "file":
        if param.size != k:
            raise ValueError(f"{spec} has {param.size} entries but k = {k}")
        return param
    if kind == "unif":
        if param > k:
            raise ValueError(f"unif:{param} needs a support of at most k = {k}")
        p = np.zeros(k)
        p[rng.choice(k, size=param, replace=False)] = 1.0 / param
        return p
    i = np.arange(k, dtype=np.float64)
    if kind == "geo":
        # (1-λ)^i λ, computed in logs so that large k does not underflow to NaN
        weights = np.exp(i * math.log1p(-param))
    else:
        weights = (i + 1.0) ** (-param)
    base = weights / weights.sum()
    p = np.empty(k)
    p[rng.permutation(k)] = base
    return p


def support_for_mass(p: np.ndarray, mass: float) -> int:
    """Smallest s such that the s largest entries of p hold at least ``mass``."""
    ordered = np.sort(p)[::-1]
    s = int(np.searchsorted(np.cumsum(ordered), mass - 1e-12) + 1)
    return max(1, min(s, int(np.count_nonzero(p))))
