"""ldpdist: distribution estimation from locally differentially private reports.

Each user privatizes one value on their own device (a *mechanism*); a server aggregates the
reports and *estimates* the distribution. The numerical core is Rust (``ldpdist._core``);
this package is a thin numpy API over it.

Mechanisms (``ldpdist.<Name>(k, epsilon)``; see ``ldpdist.mechanisms``)
-----------------------------------------------------------------------
RandomizedResponse, HadamardResponse, RAPPOR, OptimizedUnaryEncoding, OptimizedLocalHashing,
SubsetSelection, and CompressivePrivatization(k, epsilon, m, seed) for sparse distributions;
PublicCoinHashing(k, bits, seed): ℓ-bit public-coin hashing (communication-limited, NOT private)

Modules
-------
ldpdist.kernels
    FWHT, simplex projections, seeded sign matrices, OMP, exact parallel samplers.
ldpdist.mechanisms
    The mechanisms, their aggregator and ``from_dict``.
ldpdist.decoders
    raw / normalize / project / sparse_project / ibu.
ldpdist.reports
    Reports files that carry their spec's fingerprint and a batch id.
ldpdist.specs
    Spec fingerprints, the mechanism registry and ``from_dict``.
ldpdist.memory
    The memory budget every large allocation is checked against.
ldpdist.errors
    Exception classes.
"""

from . import decoders, errors, kernels, mechanisms, memory, reports, specs
from .errors import (DuplicateBatchError, IntegrityError, InternalError, SpecMismatchError)
from .memory import memory_limit, set_memory_limit
from .reports import ReportBatch, read_reports, write_reports
from .mechanisms import (
    Aggregator,
    CompressivePrivatization,
    HadamardResponse,
    Mechanism,
    OptimizedLocalHashing,
    OptimizedUnaryEncoding,
    PublicCoinHashing,
    RAPPOR,
    RandomizedResponse,
    SubsetSelection,
    from_dict,
)

__version__ = "0.1.0"

__all__ = [
    "Aggregator",
    "DuplicateBatchError",
    "IntegrityError",
    "ReportBatch",
    "SpecMismatchError",
    "errors",
    "memory",
    "memory_limit",
    "read_reports",
    "reports",
    "set_memory_limit",
    "specs",
    "write_reports",
    "CompressivePrivatization",
    "HadamardResponse",
    "InternalError",
    "Mechanism",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "PublicCoinHashing",
    "RAPPOR",
    "RandomizedResponse",
    "SubsetSelection",
    "decoders",
    "from_dict",
    "kernels",
    "mechanisms",
    "__version__",
]
