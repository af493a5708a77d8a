"""Linear queries under local differential privacy (papers/linear-queries-ldp.txt).

Each user holds a value ``v`` in ``[0, J)`` drawn from an unknown distribution ``p``; the
analyst wants inner products ``⟨q, p⟩ = E[q[v]]`` of queries ``q ∈ R^J`` with ``p``.

AdaptiveLinearQueries
    Adaptive sample splitting (Algorithm 6, Theorem 5.2): pure ε-LDP, one bit per user, for
    queries chosen one at a time from the answers so far (an interactive session).
adaptive_error_bound
    The Theorem 5.2 bound on the expected largest error over the rounds.
"""

from .adaptive import AdaptiveLinearQueries, Round, adaptive_error_bound

__all__ = ["AdaptiveLinearQueries", "Round", "adaptive_error_bound"]
