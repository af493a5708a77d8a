"""Presets of J. Acharya, P. Kairouz, Y. Liu, Z. Sun, "Estimating Sparse Discrete
Distributions Under Privacy and Communication Constraints", ALT 2021 (PMLR 132), Section 4
(see the docs page Mechanisms › Sparse estimation, docs/mechanisms/sparse.md), and a
shoot-out of the library's sparse methods that no paper has.

* ``sparse-ldp`` — Figure 2 left: d_TV against the support size s = 2^i (i = 1..12) of a
  uniform p, k = 5000, n = 3·10^6, ε ∈ {0.5, 0.9}; one-bit HR (Algorithm 1) with the sparse
  projection (s known) and with the plain projection (the paper's baseline).
* ``sparse-comm`` — Figure 2 right: the same axes for ℓ-bit public-coin hashing, ℓ = 1..7,
  n = 4·10^5, two-stage estimator (eq. (14)) with s known. No privacy (ε is empty). The
  aggregates come from ``simulate`` under the ideal-hash model (CSV path
  ``simulate-ideal-hash``).
* ``sparse-shootout`` — on the compressive-privatization grid (k = 10^4, ε = 0.5, Unif(10),
  Unif(25), Geo(0.8), Geo(0.6), n = 10^5 … 10^6): CP, one-bit HR and K-ary HR with the sparse
  projection, two-stage RAPPOR, each with s known (for Geo: the support holding 99% of the
  mass) and with s chosen by the noise-level rule (decoder ``…/auto``).

The paper gives no numbers, only the qualitative findings (error falls sharply as s
decreases; larger ε or ℓ lowers it; the sparse projection is clearly better than the plain
one); tests/test_sparse_experiments.py checks the last one on a quick grid.
"""

from __future__ import annotations

from typing import Dict

from .grid import Preset

_SUPPORTS = tuple(f"unif:{2 ** i}" for i in range(1, 13))
_QUICK_SUPPORTS = tuple(f"unif:{2 ** i}" for i in (1, 3, 5, 7, 9, 11))
_TINY_SUPPORTS = ("unif:2", "unif:16", "unif:128")

PRESETS: Dict[str, Preset] = {
    "sparse-ldp": Preset(
        description="Sparse estimation, Figure 2 left: d_TV vs support size s, k = 5000, "
                    "n = 3e6, eps in {0.5, 0.9}; one-bit HR with sparse projection (s known) "
                    "and with plain projection",
        mechanisms=(("obhr", ("sparse_project", "project")),),
        distributions=_SUPPORTS, ks=(5000,), epsilons=(0.5, 0.9), ns=(3_000_000,), runs=5,
        metric="tv", x="support", quick_runs=2, quick_distributions=_QUICK_SUPPORTS,
        tiny_ks=(1000,), tiny_ns=(20_000,), tiny_distributions=_TINY_SUPPORTS),
    "sparse-comm": Preset(
        description="Sparse estimation, Figure 2 right: d_TV vs support size s, k = 5000, "
                    "n = 4e5; l-bit public-coin hashing, l = 1..7, two-stage estimator "
                    "(s known); no privacy",
        mechanisms=tuple(("pch", ("two_stage",), {"bits": bits}) for bits in range(1, 8)),
        distributions=_SUPPORTS, ks=(5000,), epsilons=(None,), ns=(400_000,), runs=5,
        metric="tv", x="support", quick_runs=2, quick_distributions=_QUICK_SUPPORTS,
        tiny_ks=(1000,), tiny_ns=(20_000,), tiny_distributions=_TINY_SUPPORTS),
    "sparse-shootout": Preset(
        description="Sparse methods on the compressive-privatization grid: l1 error vs n, "
                    "k = 10^4, eps = 0.5; CP, one-bit HR, HR (sparse projection) and "
                    "two-stage RAPPOR, each with s known and with s from the noise level",
        mechanisms=(("cp", ("project", "project/auto")),
                    ("obhr", ("sparse_project", "sparse_project/auto")),
                    ("hr", ("sparse_project", "sparse_project/auto")),
                    ("tsrappor", ("two_stage_project", "two_stage_project/auto"))),
        distributions=("unif:10", "unif:25", "geo:0.8", "geo:0.6"), ks=(10_000,),
        epsilons=(0.5,), ns=(100_000, 200_000, 500_000, 1_000_000), runs=10, metric="l1",
        m=500, quick_ns=(100_000, 1_000_000), quick_runs=2, tiny_m=100,
        notes="s known: Unif(s), or the support holding 99% of a Geo's mass"),
}
