"""Experiment commands: ``ldpdist reproduce PRESET`` and ``ldpdist simulate``.

Both run a grid of *points* — one (k, ε, distribution, n, run) each, at which every listed
mechanism estimates the distribution with every listed decoder — and write one CSV row per
(point, mechanism, decoder) plus a PNG of the error (or time) against n.

CSV columns: ``mechanism, decoder, distribution, k, m, sparsity, support, epsilon, n, run, l1,
l2, seconds, path``. ``mechanism`` carries preset parameters (``PCH ℓ=3``). ``decoder`` is
a decoder name, or ``DECODER/auto`` when s was left to the noise-level rule
(:func:`ldpdist.decoders.noise_level_sparsity`; CP: its OMP noise-level stop). ``m`` is CP's
report count and ``sparsity`` the s that CP's OMP or a sparse decoder (``sparse_project``,
``two_stage``…) used — given, or chosen by the rule — empty when unused. ``support`` is the
number of values with positive probability in p. ``epsilon`` is empty for a mechanism without
privacy (PCH). ``l1``/``l2`` are ‖p̂ − p‖ against the true distribution p (d_TV = ℓ1/2, the
metric ``tv`` of the plots). ``path`` says how the aggregate was produced:

* ``simulate`` — ``mechanism.simulate(true_counts, seed)``, the aggregate of privatizing the
  users, exact in distribution (no per-user report is stored). ``seconds`` is the wall time
  of ``simulate`` plus that decoder's ``estimate``.
* ``simulate-ideal-hash`` — PCH's ``simulate``: exact in distribution for fully independent
  hash functions (its stage counts are N_x + Binomial(n − N_x, 2^−ℓ) independently over x),
  not for the pairwise-independent family its ``privatize`` uses.
* ``privatize`` — real per-user reports from ``privatize`` (in chunks, to bound memory),
  aggregated and decoded. ``seconds`` is the server's time only: ``Aggregator.add`` of all
  chunks plus ``estimate`` (privatization is not counted).

Distributions (``--dist``): ``geo:λ`` is p_i ∝ (1−λ)^i λ over i < k, ``zipf:a`` is
p_i ∝ (i+1)^(−a); both are placed on a random permutation of [0, k) drawn per run (the
papers do not say where the mass sits; a random placement favours no mechanism's structure).
``unif:s`` is uniform on a random support of size s drawn per run. ``path.npy`` is a fixed
1-D float array summing to 1 (it sets k). Within a run the placement is the same for every n
and ε, so the curves of one run are comparable.

Compressive privatization (CP) needs the sparsity s given to OMP: for ``unif:s`` it is s,
otherwise the smallest support holding ``mass`` of the probability (preset parameter, 0.99 by
default). The paper asks for top-s mass ≥ 0.9; s at 90% leaves a 4–10% tail that is an error
floor (CP lands near projected HR on Geo), while 99% also satisfies the paper's condition and
recovers the head well (docs: Accuracy, and Mechanisms › Compressive privatization). The public matrix seed of CP
is drawn per run.

Reproducibility: point i of a grid draws its counts and mechanism seeds from
``SeedSequence([seed, i])``, and the distribution from (seed, run, distribution, k), so the
results do not depend on ``--jobs`` (nor on the thread count: seeded sampling is
bit-identical whatever the number of threads).

``ldpdist reproduce linear-queries`` is not such a grid (its panels are query answers, not
distributions): ``ldpdist.experiments.linear_queries`` runs it and writes its own CSV
columns.

Python API: :data:`PRESETS`, :func:`make_points`, :func:`run_grid`,
:func:`write_csv`, :func:`read_csv`, :func:`plot` (:func:`figure` returns its Figure).
"""

from __future__ import annotations

from .distributions import (distribution_label, load_distribution, make_distribution,
                            parse_distribution, support_for_mass)
from .grid import (COLUMNS, Interrupted, Point, Preset, build_mechanism, make_points,
                   mechanism_key, run_grid, run_point)
from .plotting import figure, plot
from .presets import PRESETS
from .results import read_csv, write_csv
from .commands import register

__all__ = ["COLUMNS", "PRESETS", "Interrupted", "Point", "Preset", "build_mechanism",
           "distribution_label", "figure", "load_distribution", "make_distribution",
           "make_points", "mechanism_key", "parse_distribution", "plot", "read_csv",
           "register", "run_grid", "run_point", "support_for_mass", "write_csv"]
