"""Heavy hitters over huge and unknown domains: strings (or bytes, or 64-bit integers) in,
frequent items out.

Items are mapped to a domain of ``bits``-bit values by a documented, seeded, public hash
(:mod:`ldpdist.heavy_hitters.items`, reproducible in any language from its specification and
test vectors); a protocol finds the frequent hashed values from one ε-LDP report per user,
and names them when given a dictionary of candidate items.

Protocols (each one report per user, ε per user checked exactly on every group's channel):

* :class:`PEM`, prefix extension (Wang, Li, Lopuhaä-Zwakenberg, Chen & Jha, IEEE TDSC 2021);
* :class:`TreeHist` (Bassily, Nissim, Stemmer & Thakurta, NeurIPS 2017);
* :class:`CountMeanSketch` (CMS, and HCMS with ``hadamard=True``) and
  :class:`SequenceFragmentPuzzle` (SFP) (Apple Differential Privacy Team, 2017);
* :class:`CompressiveHeavyHitters`: one round over hashed (tag, chunk) pairs decoded with
  Hadamard response (this library's).

They share :class:`HeavyHitterProtocol` (spec, fingerprint, client entry points) and the
aggregators :class:`KeptReportsAggregator` / :class:`SketchAggregator` (merging, batch ids,
checksummed states); reports files, ``ldpdist hh`` and :mod:`ldpdist.dask` take them all.
"""

from .items import (HASH_VERSION, MAX_ITEM_BYTES, PERSONALIZATION, encode_item, hash_item,
                    hash_items)
from .protocol import (HeavyHitterAggregator, HeavyHitterProtocol, ItemFrequencies,
                       KeptReportsAggregator, SketchAggregator, aggregator_from_bytes, from_dict,
                       protocols)
from .prefixes import PrefixProtocol
from .pem import PEM, PEMAggregator
from .treehist import TreeHist, TreeHistAggregator
from .sketch import CountMeanSketch, CountMeanSketchAggregator
from .sfp import SequenceFragmentPuzzle, SequenceFragmentPuzzleAggregator
from .compressive import CompressiveAggregator, CompressiveHeavyHitters

__all__ = ["PEM", "PEMAggregator", "TreeHist", "TreeHistAggregator", "CountMeanSketch",
           "CountMeanSketchAggregator", "SequenceFragmentPuzzle",
           "SequenceFragmentPuzzleAggregator", "CompressiveHeavyHitters",
           "CompressiveAggregator", "ItemFrequencies", "from_dict", "protocols",
           "aggregator_from_bytes", "HeavyHitterProtocol", "HeavyHitterAggregator",
           "KeptReportsAggregator", "SketchAggregator", "PrefixProtocol", "hash_item",
           "hash_items", "encode_item", "MAX_ITEM_BYTES", "HASH_VERSION", "PERSONALIZATION"]
