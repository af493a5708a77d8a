"""LDP mechanisms: client-side privatization and server-side estimation.

Every class implements the interface of :class:`~ldpdist.mechanisms.base.Mechanism`.
"""

from .aggregator import Aggregator
from .asymmetric_binary import AsymmetricBinaryResponse
from .base import BitVectorMechanism, Mechanism, from_dict
from .block_hadamard import BlockHadamardResponse
from .compressive import CompressivePrivatization
from .hadamard_response import HadamardResponse
from .high_low_hadamard import HighLowHadamardResponse
from .local_hashing import OptimizedLocalHashing
from .one_bit_hadamard import OneBitHadamardResponse
from .public_coin_hashing import PublicCoinHashing
from .randomized_response import RandomizedResponse
from .subset_selection import SubsetSelection
from .two_stage_rappor import TwoStageRAPPOR
from .unary_encoding import RAPPOR, OptimizedUnaryEncoding

# Short names used by the command line and the experiments.
SHORT_NAMES = {
    "rr": "RandomizedResponse",
    "rappor": "RAPPOR",
    "ss": "SubsetSelection",
    "hr": "HadamardResponse",
    "oue": "OptimizedUnaryEncoding",
    "olh": "OptimizedLocalHashing",
    "cp": "CompressivePrivatization",
    "tsrappor": "TwoStageRAPPOR",
    "obhr": "OneBitHadamardResponse",
    "pch": "PublicCoinHashing",
    "abr": "AsymmetricBinaryResponse",
    "bhr": "BlockHadamardResponse",
    "hlhr": "HighLowHadamardResponse",
}

__all__ = [
    "SHORT_NAMES",
    "Aggregator",
    "BitVectorMechanism",
    "Mechanism",
    "from_dict",
    "AsymmetricBinaryResponse",
    "BlockHadamardResponse",
    "CompressivePrivatization",
    "HadamardResponse",
    "HighLowHadamardResponse",
    "OptimizedLocalHashing",
    "OneBitHadamardResponse",
    "PublicCoinHashing",
    "RandomizedResponse",
    "SubsetSelection",
    "RAPPOR",
    "OptimizedUnaryEncoding",
    "TwoStageRAPPOR",
]
