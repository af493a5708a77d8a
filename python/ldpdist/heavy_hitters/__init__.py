"""Heavy hitters over huge and unknown domains: strings (or bytes, or 64-bit integers) in,
frequent items out.

Items are mapped to a domain of ``bits``-bit values by a documented, seeded, public hash
(:mod:`ldpdist.heavy_hitters.items`, reproducible in any language from its specification and
test vectors); a protocol finds the frequent hashed values from one ε-LDP report per user,
and names them when given a dictionary of candidate items.

Implemented: :class:`PEM` (prefix extension; Wang, Li, Lopuhaä-Zwakenberg, Chen & Jha, IEEE
TDSC 2021). See the user guide's page *Heavy hitters* for what is not implemented yet.
"""

from .items import (HASH_VERSION, MAX_ITEM_BYTES, PERSONALIZATION, encode_item, hash_item,
                    hash_items)
from .protocol import (HeavyHitterProtocol, ItemFrequencies, KeptReportsAggregator,
                       SketchAggregator, aggregator_from_bytes, from_dict, protocols)
from .pem import PEM, PEMAggregator

__all__ = ["PEM", "PEMAggregator", "ItemFrequencies", "from_dict", "protocols",
           "aggregator_from_bytes", "HeavyHitterProtocol", "KeptReportsAggregator",
           "SketchAggregator", "hash_item", "hash_items", "encode_item", "MAX_ITEM_BYTES",
           "HASH_VERSION", "PERSONALIZATION"]
