"""ldpdist: distribution estimation from locally differentially private reports.

Each user privatizes one value on their own device (a *mechanism*); a server aggregates the
reports and *estimates* the distribution. The numerical core is Rust (``ldpdist._core``);
this package is a thin numpy API over it.

Modules
-------
ldpdist.kernels
    FWHT, simplex projections, seeded sign matrices, OMP, exact parallel samplers.
"""

from ._core import InternalError
from . import kernels

__version__ = "0.1.0"

__all__ = ["kernels", "InternalError", "__version__"]
