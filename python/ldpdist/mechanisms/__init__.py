"""LDP mechanisms: client-side privatization and server-side estimation.

Every class implements the interface of :class:`~ldpdist.mechanisms.base.Mechanism`.

Each mechanism module registers its class with ``@register("short", "Label")``
(:func:`ldpdist.specs.register`); the import below is what loads it. The lists of mechanisms
(``__all__`` here and in ``ldpdist``, :data:`SHORT_NAMES`, the command line's choices, the
specs :func:`from_dict` reads) are all read from that registry: adding a mechanism adds one
import line here (see the contributor's page of the docs, "Adding a mechanism").
"""

from typing import Dict

from ..specs import registered, registered_short_names
from .aggregator import Aggregator
from .base import BitVectorMechanism, Mechanism, from_dict

# The mechanisms, one line each (the order is the command line's and the experiments').
from .randomized_response import RandomizedResponse as RandomizedResponse
from .unary_encoding import RAPPOR as RAPPOR, OptimizedUnaryEncoding as OptimizedUnaryEncoding
from .subset_selection import SubsetSelection as SubsetSelection
from .hadamard_response import HadamardResponse as HadamardResponse
from .local_hashing import OptimizedLocalHashing as OptimizedLocalHashing
from .compressive import CompressivePrivatization as CompressivePrivatization
from .two_stage_rappor import TwoStageRAPPOR as TwoStageRAPPOR
from .one_bit_hadamard import OneBitHadamardResponse as OneBitHadamardResponse
from .public_coin_hashing import PublicCoinHashing as PublicCoinHashing
from .asymmetric_binary import AsymmetricBinaryResponse as AsymmetricBinaryResponse
from .block_hadamard import BlockHadamardResponse as BlockHadamardResponse
from .high_low_hadamard import HighLowHadamardResponse as HighLowHadamardResponse

#: Short names used by the command line and the experiments: short name → class name, as
#: each mechanism registered it (``@register("hr")``).
SHORT_NAMES: Dict[str, str] = registered_short_names()

# ``from ldpdist.mechanisms import *`` (and the top-level ``ldpdist``) export the registered
# mechanisms with the aggregator, the base class and ``from_dict``.
__all__ = ["Aggregator", "Mechanism", "from_dict", *registered()]
