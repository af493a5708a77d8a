"""ldpdist: distribution estimation from locally differentially private reports.

Each user privatizes one value on their own device (a *mechanism*); a server aggregates the
reports and *estimates* the distribution. The numerical core is Rust (``ldpdist._core``);
this package is a thin numpy API over it.

Mechanisms
----------
One class per mechanism, ``ldpdist.<Name>(k, epsilon, ...)``, as registered in
``ldpdist.mechanisms`` (``ldpdist.mechanisms.SHORT_NAMES`` gives the command line's short
names); the mechanism pages of the documentation describe each and when to choose it:
{mechanisms}

Modules
-------
ldpdist.kernels
    FWHT, simplex projections, seeded sign matrices, OMP, exact parallel samplers.
ldpdist.mechanisms
    The mechanisms, their aggregator and ``from_dict``.
ldpdist.decoders
    raw / normalize / project / sparse_project / ibu (two_stage / two_stage_project for
    the two-stage mechanisms), and the consistency family.
ldpdist.consistency
    The ten post-processing methods of Wang et al. (NDSS 2020): Base-Pos, Post-Pos,
    Base-Cut, Norm, Norm-Mul, Norm-Cut, Norm-Sub, MLE-Apx, Power, PowerNS; set/range-sum
    query answers.
ldpdist.reports
    Reports (the arrays ``privatize`` returns, tagged with their spec's fingerprint) and
    reports files that carry it with a batch id.
ldpdist.specs
    Spec fingerprints, the mechanism registry and ``from_dict``.
ldpdist.planner
    ``plan``: which mechanism and decoder, and how many users (predicted errors).
ldpdist.privacy
    Context-aware privacy budgets (budget matrices), their exact verifier.
ldpdist.linear
    Linear queries A·p under LDP: GaussianLinearQueries ((ε, δ), calibrated to the exact
    sensitivity), RejectionSamplingLinearQueries (pure ε) and AdaptiveLinearQueries
    (adaptive sample splitting, one bit per user, queries chosen from earlier answers).
ldpdist.memory
    The memory budget every large allocation is checked against.
ldpdist.errors
    Exception classes.
"""

import textwrap as _textwrap

from . import (consistency, decoders, empirical_bayes, errors, kernels, linear, mechanisms,
               memory, planner, privacy, reports, specs)
from .errors import (DuplicateBatchError, IntegrityError, InternalError, SpecMismatchError)
from .memory import memory_limit, set_memory_limit
from .planner import Plan, PlanRow, plan
from .reports import ReportBatch, Reports, read_reports, write_reports
from .specs import from_json
# Aggregator, Mechanism, from_dict and every registered mechanism class (the list lives in
# ldpdist.mechanisms, one import line per mechanism)
from .mechanisms import *  # noqa: F401,F403

__version__ = "0.1.0"

__all__ = [
    "DuplicateBatchError",
    "IntegrityError",
    "ReportBatch",
    "Reports",
    "SpecMismatchError",
    "errors",
    "from_json",
    "memory",
    "memory_limit",
    "privacy",
    "read_reports",
    "reports",
    "set_memory_limit",
    "specs",
    "write_reports",
    "InternalError",
    "Plan",
    "PlanRow",
    "plan",
    "planner",
    "consistency",
    "decoders",
    "kernels",
    "linear",
    "mechanisms",
    "__version__",
]
__all__ += mechanisms.__all__

if __doc__ is not None:  # (None under python -OO) the registered mechanisms, listed above
    __doc__ = __doc__.replace("{mechanisms}", _textwrap.fill(
        ", ".join(specs.registered()), width=92, break_on_hyphens=False))
