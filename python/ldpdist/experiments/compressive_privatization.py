"""Presets of Z. Xiong, Z. Huang, X. Mao, J. Wang, S. Ying, "Compressive Privatization: Sparse
Distribution Estimation under Locally Differential Privacy", arXiv:2012.02081 (2020): its
Figures 2 and 3 (see the docs page Mechanisms › Compressive privatization,
docs/mechanisms/compressive.md)."""

from __future__ import annotations

from typing import Dict

from .grid import Preset

_BASELINES = ("rr", "rappor", "ss", "hr")
_BOTH = ("normalize", "project")

_CP_NS = tuple(range(50_000, 1_000_001, 50_000))
_CP_QUICK_NS = (50_000, 350_000, 650_000, 1_000_000)
_CP_DISTS = ("geo:0.8", "geo:0.6", "unif:10", "unif:25")

PRESETS: Dict[str, Preset] = {
    "cp-figure2": Preset(
        description="Compressive privatization, Figure 2: l1 error vs n; CP (projected) "
                    "against RR, RAPPOR, SS, HR with the normalized and projected decoders",
        mechanisms=tuple((b, _BOTH) for b in _BASELINES) + (("cp", ("project",)),),
        distributions=_CP_DISTS, ks=(10_000,), epsilons=(0.5,), ns=_CP_NS, runs=10,
        metric="l1", m=500, quick_ns=_CP_QUICK_NS, tiny_m=100),
    "cp-figure3": Preset(
        description="Compressive privatization, Figure 3: as Figure 2 with CP's normalized "
                    "decoder, for eps in {0.25, 0.5, 1.0} (our choice: the paper's values are "
                    "not in its text)",
        mechanisms=tuple((b, _BOTH) for b in _BASELINES) + (("cp", ("normalize",)),),
        distributions=_CP_DISTS, ks=(10_000,), epsilons=(0.25, 0.5, 1.0), ns=_CP_NS,
        runs=10, metric="l1", m=500, quick_ns=(50_000, 500_000, 1_000_000), quick_runs=2,
        tiny_m=100, notes="ε values are ours: not in the paper's text"),
}
