"""Chi-square tail probabilities for the statistical tests, without scipy (not a dependency
of the project): the subset of ``scipy.stats`` the tests use, same names and results to
about 1e-12 relative.

``chi2.sf(x, df)`` is the regularized upper incomplete gamma function Q(df/2, x/2): its
power series below x/2 < df/2 + 1, Lentz's continued fraction above (accurate for tiny tails).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np


def _upper_regularized_gamma(a: float, x: float) -> float:
    if x <= 0:
        return 1.0
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series for the lower function P, then Q = 1 - P
        term = total = 1.0 / a
        n = 0
        while abs(term) > abs(total) * 1e-16:
            n += 1
            term *= x / (a + n)
            total += term
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-16:
            break
    return math.exp(log_prefix) * h


class _Chi2:
    @staticmethod
    def sf(x: float, df: float) -> float:
        """P(X > x) for X chi-square with ``df`` degrees of freedom."""
        return _upper_regularized_gamma(df / 2.0, float(x) / 2.0)


chi2 = _Chi2()


def chisquare(observed, expected=None) -> SimpleNamespace:
    """Pearson's goodness-of-fit test (uniform expectation by default), as scipy's."""
    observed = np.asarray(observed, dtype=float)
    if expected is None:
        expected = np.full(observed.shape, observed.mean())
    expected = np.asarray(expected, dtype=float)
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return SimpleNamespace(statistic=statistic, pvalue=chi2.sf(statistic, observed.size - 1))


def chi2_contingency(table):
    """Pearson's test of independence of a 2-D table (no continuity correction; scipy
    applies Yates's only for 1 degree of freedom): (statistic, p-value, dof, expected)."""
    table = np.asarray(table, dtype=float)
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / table.sum()
    dof = (table.shape[0] - 1) * (table.shape[1] - 1)
    if dof == 1:
        diff = np.maximum(np.abs(table - expected) - 0.5, 0.0)  # Yates, as scipy does
        statistic = float((diff ** 2 / expected).sum())
    else:
        statistic = float(((table - expected) ** 2 / expected).sum())
    return statistic, chi2.sf(statistic, dof), dof, expected
