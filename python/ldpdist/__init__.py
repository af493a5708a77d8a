"""ldpdist: distribution estimation from locally differentially private reports.

Each user privatizes one value on their own device (a *mechanism*); a server aggregates the
reports and *estimates* the distribution. The numerical core is Rust (``ldpdist._core``);
this package is a thin numpy API over it.

Mechanisms (``ldpdist.<Name>(k, epsilon)``; see ``ldpdist.mechanisms``)
-----------------------------------------------------------------------
RandomizedResponse, HadamardResponse, RAPPOR, OptimizedUnaryEncoding, OptimizedLocalHashing,
SubsetSelection, and for sparse distributions CompressivePrivatization(k, epsilon, m, seed),
OneBitHadamardResponse (one bit per user; decoder="sparse_project") and TwoStageRAPPOR
(Algorithm 2 of the sparse-estimation paper)
and PublicCoinHashing(k, bits, seed): ℓ-bit public-coin hashing (communication-limited, NOT
private). Context-aware LDP (a budget per ordered pair of values, ``ldpdist.privacy``):
AsymmetricBinaryResponse(epsilon_01, epsilon_10), the optimal binary mechanism;
HighLowHadamardResponse(k, epsilon, sensitive) (only the sensitive values are protected);
BlockHadamardResponse(blocks, epsilon) (ε inside each block of a partition, the block in the
clear)

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

from . import (consistency, decoders, empirical_bayes, errors, kernels, linear, mechanisms,
               memory, planner, privacy, reports, specs)
from .errors import (DuplicateBatchError, IntegrityError, InternalError, SpecMismatchError)
from .memory import memory_limit, set_memory_limit
from .planner import Plan, PlanRow, plan
from .reports import ReportBatch, Reports, read_reports, write_reports
from .mechanisms import (
    Aggregator,
    AsymmetricBinaryResponse,
    BlockHadamardResponse,
    CompressivePrivatization,
    HadamardResponse,
    HighLowHadamardResponse,
    Mechanism,
    OneBitHadamardResponse,
    OptimizedLocalHashing,
    OptimizedUnaryEncoding,
    PublicCoinHashing,
    RAPPOR,
    RandomizedResponse,
    SubsetSelection,
    TwoStageRAPPOR,
    from_dict,
)

__version__ = "0.1.0"

__all__ = [
    "Aggregator",
    "AsymmetricBinaryResponse",
    "DuplicateBatchError",
    "IntegrityError",
    "ReportBatch",
    "Reports",
    "SpecMismatchError",
    "errors",
    "memory",
    "memory_limit",
    "privacy",
    "read_reports",
    "reports",
    "set_memory_limit",
    "specs",
    "write_reports",
    "BlockHadamardResponse",
    "CompressivePrivatization",
    "HadamardResponse",
    "HighLowHadamardResponse",
    "InternalError",
    "Mechanism",
    "OneBitHadamardResponse",
    "Plan",
    "PlanRow",
    "plan",
    "planner",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "PublicCoinHashing",
    "RAPPOR",
    "RandomizedResponse",
    "SubsetSelection",
    "TwoStageRAPPOR",
    "consistency",
    "decoders",
    "from_dict",
    "kernels",
    "linear",
    "mechanisms",
    "__version__",
]
