"""Presets of the slides of J. Acharya, Z. Sun, H. Zhang, "Hadamard Response: Estimating
Distributions Privately, Efficiently, and with Little Communication", AISTATS 2019
(arXiv:1802.04705), as presented at ITA 2018: ℓ2 error and decoding time against n (see the
docs page Mechanisms › Classic mechanisms, docs/mechanisms/classic.md)."""

from __future__ import annotations

from typing import Dict

from .grid import Preset

_BASELINES = ("rr", "rappor", "ss", "hr")

PRESETS: Dict[str, Preset] = {
    "hr-l2": Preset(
        description="Hadamard response slides: l2 error vs n, k = 1000, Geo(0.8), projected "
                    "decoder, eps in {0.5, 2, 5, 7}",
        mechanisms=tuple((b, ("project",)) for b in _BASELINES), distributions=("geo:0.8",),
        ks=(1000,), epsilons=(0.5, 2.0, 5.0, 7.0),
        ns=(1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000),
        runs=10, metric="l2", quick_ns=(1000, 10_000, 100_000, 1_000_000),
        tiny_ns=(1000, 20_000)),
    "hr-time": Preset(
        description="Hadamard response slides: decoding time (aggregation of real reports + "
                    "projected estimate) vs n, Geo(0.8), eps = 1",
        mechanisms=tuple((b, ("project",)) for b in _BASELINES), distributions=("geo:0.8",),
        ks=(100, 1000, 5000, 10_000), epsilons=(1.0,),
        ns=(10_000, 30_000, 100_000, 300_000, 1_000_000), runs=3, metric="seconds",
        path="privatize", quick_ns=(10_000, 30_000, 100_000, 300_000), quick_runs=2,
        tiny_ks=(100, 1000), tiny_ns=(2000, 20000),
        notes="eps = 1 is our choice (the slides' text does not give its value)"),
}

