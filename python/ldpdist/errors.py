"""Exception classes of ldpdist.

Every error ldpdist raises on bad input is a ``ValueError``, ``TypeError`` or ``MemoryError``
(or a subclass below, which lets callers tell integrity failures apart); an internal bug
raises :class:`InternalError`. Nothing else escapes the public API on purpose.
"""

from __future__ import annotations

from ._core import InternalError

__all__ = ["InternalError", "IntegrityError", "SpecMismatchError", "DuplicateBatchError",
           "CliError"]


class IntegrityError(ValueError):
    """A file or serialized state is corrupt, truncated or not what it claims to be
    (bad magic bytes, checksum mismatch, inconsistent counts)."""


class SpecMismatchError(ValueError):
    """Reports or a state were made under another mechanism spec than the one in use
    (another mechanism, k, ε, seed, …: the spec fingerprints differ)."""


class DuplicateBatchError(ValueError):
    """The same batch of reports would be counted twice (merging two states that both hold
    it, or adding a reports file again)."""


class CliError(Exception):
    """A user-facing error of the ``ldpdist`` command: one line on stderr, exit status 2."""
