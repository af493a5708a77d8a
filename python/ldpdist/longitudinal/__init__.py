"""Memoized (longitudinal) mechanisms for repeated collection from the same users.

Each user holds a permanent secret (:func:`make_secrets`). A first, *permanent* round of
randomization is a deterministic function of the secret and the value (an HMAC-SHA256
stream, see ``ldpdist.longitudinal.base``), so it is the same in every collection while
the value does not change, and the client needs no stored table; a second,
*instantaneous* round re-randomizes it with fresh randomness for each report.

Every class states two realized guarantees, computed exactly from its channels:

``epsilon_1``
    the ε of one report (the chained channel);
``epsilon_infinity``
    the ε of the memoized answer, which bounds what any number of reports of one fixed
    value reveal (a changing value is not covered: each distinct value has its own
    memoized answer).

Server side: ``mechanism.aggregator()`` (:class:`LongitudinalAggregator`) counts one
collection's reports into exact integer sums, with batch ids, merging and a checksummed
state (the heavy-hitter protocols' aggregator machinery); reports files
(:func:`ldpdist.write_reports`, :func:`ldpdist.read_reports`) carry the reports.
:func:`simulate_campaign` (``mechanism.simulate_campaign(true_counts, T, seed)``) draws T
collections from the same users at the level of counts, from their exact joint law.

Mechanisms: :class:`LongitudinalGRR`, :class:`LongitudinalSUE`, :class:`LongitudinalOUE`,
:class:`LongitudinalOSUE`, :class:`LongitudinalSOUE` (Arcolezi, Couchot, Al Bouna & Xiao,
Digital Communications and Networks, 2022), :class:`MemoizedRAPPOR` (Erlingsson, Pihur &
Korolova, CCS 2014) and :class:`DBitFlipPM` (Ding, Kulkarni & Yekhanin, NeurIPS 2017).
They share the spec format of the other mechanisms (``{"mechanism": name, "format": 1,
...}``, :func:`ldpdist.specs.to_json` spec files); :func:`ldpdist.from_dict` reads them (as
does :func:`ldpdist.longitudinal.from_dict`), but they are not in the main mechanism
registry (the command line's mechanism choices and the shared mechanism test suite).
"""

from .aggregate import CollectionMismatchError, LongitudinalAggregator, simulate_campaign
from .base import LongitudinalMechanism, from_dict, make_secrets
from .dbitflip import DBitFlipPM
from .grr import LongitudinalGRR
from .rappor import MemoizedRAPPOR
from .unary import (LongitudinalOSUE, LongitudinalOUE, LongitudinalSOUE, LongitudinalSUE,
                    LongitudinalUnary)

__all__ = ["LongitudinalMechanism", "LongitudinalUnary", "LongitudinalGRR", "LongitudinalSUE",
           "LongitudinalOUE", "LongitudinalOSUE", "LongitudinalSOUE", "MemoizedRAPPOR",
           "DBitFlipPM", "from_dict", "make_secrets", "LongitudinalAggregator",
           "CollectionMismatchError", "simulate_campaign"]
