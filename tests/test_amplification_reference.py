"""The generic shuffling bound checked against reference values from the published code of
Feldman, McMillan, Talwar, "Hiding Among the Clones: A Simple and Nearly Optimal Analysis of
Privacy Amplification by Shuffling" (FOCS 2021).

Source of the reference values: the authors' repository
https://github.com/apple/ml-shuffling-amplification, file ``computeamplification.py``
(commits 3fde49360b433d6d470dbec48bc49e4885b2dd53 and 993d285a546114bf8c70c33d053dca322a755707,
which print the same README output), run with scipy 2026-11-27 outside this repository (its code is
not part of ldpdist; the tests need no scipy):

* ``README_*``: the example output printed in the repository's README (n = 10⁵, ε₀ = 4,
  δ = 10⁻⁶, 10 bisection steps, block size ``step = 100``), reproduced to the last digit by
  running the code.
* ``BLOCKS``: their numerical procedure itself (``numericalanalysis``, upper and lower, 20
  bisection steps, ``step`` = ⌊sd(C)/10⌋ or 1), on 30 points of the grid below (all of
  n = 10³ and 10⁴; n = 10⁵ and 10⁶ at δ = 10⁻⁸ for ε₀ ∈ {0.5, 2, 8}: it takes up to two
  minutes per point with scipy). Its bracket
  [lower − w, upper] contains the exact ε of the clone analysis (w = their bisection width,
  2⁻²⁰ times the start of the search); it is wide (a few %) because their procedure stops
  once the remaining mass of C is below the δ accumulated and adds it (up to a factor 2 on δ).
* ``EXACT``: their per-c divergence (``onestep``, vectorized over c) weighted by scipy's
  Bin(n − 1, e^−ε₀) pmf and summed over every c within 14 sd of the mean (no blocks, no
  early stop), then bisection on ε for 40 steps: the exact ε of the clone analysis,
  bracketed to 2⁻⁴⁰ ε₀. This is the tight reference: ldpdist's upper bound must lie above
  it and within its stated relative tolerance (10⁻⁴) of it, its lower bound below it.

Errata between their code and ldpdist (see the docs page "Amplification by shuffling",
section "Validation"): their closed form (``closedformanalysis``) is a looser variant of
Theorem 3.1, (e^ε₀ − 1)/(e^ε₀ + e^−ε′)·(e^ε′ − 1) instead of (e^ε₀ − 1)/(e^ε₀ + 1)·(e^ε′ − 1)
with e^ε′ − 1 = 8√(e^ε₀ log(4/δ)/n) + 8e^ε₀/n, under the stricter condition
ε₀ < log(n / (16 log(4/δ))); ldpdist implements the theorem as stated.
"""

import pytest

from ldpdist.privacy import (closed_form_applies, shuffle_epsilon, shuffle_rr_epsilon)

TOLERANCE = 1e-4  # the relative bisection tolerance of shuffle_epsilon (its default)

# README of apple/ml-shuffling-amplification: "for eps between 0.1675385583317841 and
# 0.172790550755978"; closed form "at most 0.5378040242374512" (n = 10⁵, ε₀ = 4, δ = 10⁻⁶,
# num_iterations = 10, step = 100)
README_POINT = (100_000, 4.0, 1e-6)
README_LOWER, README_UPPER = 0.1675385583317841, 0.172790550755978
README_CLOSED = 0.5378040242374512
README_WIDTH = README_CLOSED / 2**10  # their bisection started at their closed form

# (n, ε₀, δ, ε exact: lower end, upper end of a 2⁻⁴⁰ ε₀ bisection bracket)
EXACT = [
    (   1000, 0.1, 1e-06, 0.010184791892424983, 0.010184791892515931),
    (   1000, 0.1, 1e-08, 0.013907773111168354, 0.013907773111259304),
    (   1000, 0.5, 1e-06, 0.07052346759564898, 0.07052346759610373),
    (   1000, 0.5, 1e-08, 0.09094751028987957, 0.09094751029033432),
    (   1000, 1.0, 1e-06, 0.1824123474798398, 0.1824123474807493),
    (   1000, 1.0, 1e-08, 0.2305559676096891, 0.2305559676105986),
    (   1000, 2.0, 1e-06, 0.5454979655096395, 0.5454979655114585),
    (   1000, 2.0, 1e-08, 0.683988029790271, 0.68398802979209),
    (   1000, 4.0, 1e-06, 3.989963597872702, 3.98996359787634),
    (   1000, 4.0, 1e-08, 3.9999001329560997, 3.9999001329597377),
    (   1000, 8.0, 1e-06, 7.999998817162123, 7.9999988171693985),
    (   1000, 8.0, 1e-08, 7.999999988169293, 7.999999988176569),
    (  10000, 0.1, 1e-06, 0.0028707548476631928, 0.002870754847754142),
    (  10000, 0.1, 1e-08, 0.004133119802827423, 0.004133119802918372),
    (  10000, 0.5, 1e-06, 0.020401455097271537, 0.020401455097726284),
    (  10000, 0.5, 1e-08, 0.027237813794727117, 0.027237813795181864),
    (  10000, 1.0, 1e-06, 0.05300531648026663, 0.053005316481176123),
    (  10000, 1.0, 1e-08, 0.06888042378250248, 0.06888042378341197),
    (  10000, 2.0, 1e-06, 0.15504524250354734, 0.15504524250536633),
    (  10000, 2.0, 1e-08, 0.19662399940898467, 0.19662399941080366),
    (  10000, 4.0, 1e-06, 0.6009087636339245, 0.6009087636375625),
    (  10000, 4.0, 1e-08, 0.7546292431361508, 0.7546292431397887),
    (  10000, 8.0, 1e-06, 7.999994647172571, 7.999994647179847),
    (  10000, 8.0, 1e-08, 7.99999994647078, 7.999999946478056),
    ( 100000, 0.1, 1e-06, 0.0007860117701056881, 0.0007860117701966376),
    ( 100000, 0.1, 1e-08, 0.001217044709119364, 0.0012170447092103133),
    ( 100000, 0.5, 1e-06, 0.005812548730773415, 0.005812548731228162),
    ( 100000, 0.5, 1e-08, 0.008114034650134272, 0.00811403465058902),
    ( 100000, 1.0, 1e-06, 0.015282062388905615, 0.01528206238981511),
    ( 100000, 1.0, 1e-08, 0.02059341480708099, 0.020593414807990484),
    ( 100000, 2.0, 1e-06, 0.045025580322544556, 0.045025580324363546),
    ( 100000, 2.0, 1e-08, 0.05876290416745178, 0.05876290416927077),
    ( 100000, 4.0, 1e-06, 0.16976974725548644, 0.16976974725912441),
    ( 100000, 4.0, 1e-08, 0.21492801664862782, 0.2149280166522658),
    ( 100000, 8.0, 1e-06, 2.188565535194357, 2.188565535201633),
    ( 100000, 8.0, 1e-08, 7.785785883046628, 7.785785883053904),
    (1000000, 0.1, 1e-06, 0.0002055669563560514, 0.00020556695644700085),
    (1000000, 0.1, 1e-08, 0.00035459203900245484, 0.00035459203909340433),
    (1000000, 0.5, 1e-06, 0.0016190943611036346, 0.001619094361558382),
    (1000000, 0.5, 1e-08, 0.0024003406642805203, 0.0024003406647352676),
    (1000000, 1.0, 1e-06, 0.004334519802796422, 0.004334519803705916),
    (1000000, 1.0, 1e-08, 0.006125476461420476, 0.006125476462329971),
    (1000000, 2.0, 1e-06, 0.012958369899934041, 0.01295836990175303),
    (1000000, 2.0, 1e-08, 0.017558901625307044, 0.017558901627126033),
    (1000000, 4.0, 1e-06, 0.049307074390526395, 0.049307074394164374),
    (1000000, 4.0, 1e-08, 0.06419684326465358, 0.06419684326829156),
    (1000000, 8.0, 1e-06, 0.44446874533605296, 0.4444687453433289),
    (1000000, 8.0, 1e-08, 0.5566390573731042, 0.5566390573803801),
]

# (n, ε₀, δ, step, their lower, their upper, their bisection width w)
BLOCKS = [
    (  1000, 0.1, 1e-06,  1, 0.01018445900938896, 0.010753337881890911, 6.363298350133683e-08),
    (  1000, 0.1, 1e-08,  1, 0.013907194225314123, 0.01430265841630311, 7.368440301639357e-08),
    (  1000, 0.5, 1e-06,  1, 0.07052227507297357, 0.0737838600436111, 3.1932494327760977e-07),
    (  1000, 0.5, 1e-08,  1, 0.09094630471737536, 0.09339339901491431, 3.611947302640477e-07),
    (  1000, 1.0, 1e-06,  1, 0.1824080214699256, 0.1902452684726237, 6.194472812755354e-07),
    (  1000, 1.0, 1e-08,  1, 0.23054481090242368, 0.2367032429012331, 6.857942092215404e-07),
    (  1000, 2.0, 1e-06,  1, 0.5454044342041016, 0.5627040863037109, 1.9073486328125e-06),
    (  1000, 2.0, 1e-08,  1, 0.6839599609375, 0.6994361877441406, 1.9073486328125e-06),
    (  1000, 4.0, 1e-06,  1, 3.9899559020996094, 3.994464874267578, 3.814697265625e-06),
    (  1000, 4.0, 1e-08,  1, 3.9999008178710938, 3.99993896484375, 3.814697265625e-06),
    (  1000, 8.0, 1e-06,  1, 8.0, 8.0, 7.62939453125e-06),
    (  1000, 8.0, 1e-08,  1, 8.0, 8.0, 7.62939453125e-06),
    ( 10000, 0.1, 1e-06,  2, 0.0028706687326290666, 0.003082255565049664, 1.7588265371620664e-08),
    ( 10000, 0.1, 1e-08,  2, 0.004132983356720292, 0.004262473071741081, 2.03184865872882e-08),
    ( 10000, 0.5, 1e-06,  4, 0.02039885493111635, 0.021457083591958297, 9.983289253225839e-08),
    ( 10000, 0.5, 1e-08,  4, 0.02723421205111365, 0.028107769154330484, 1.1436987473380947e-07),
    ( 10000, 1.0, 1e-06,  4, 0.05299361277752855, 0.05562241560097128, 2.2245940792440738e-07),
    ( 10000, 1.0, 1e-08,  4, 0.06886590700343642, 0.07083117164533495, 2.519893116936153e-07),
    ( 10000, 2.0, 1e-06,  3, 0.154982325443822, 0.160869038492371, 4.992971203179822e-07),
    ( 10000, 2.0, 1e-08,  3, 0.1965450473901023, 0.20204152830161703, 5.541365975919679e-07),
    ( 10000, 4.0, 1e-06,  1, 0.6008453369140625, 0.625335693359375, 3.814697265625e-06),
    ( 10000, 4.0, 1e-08,  1, 0.7546157836914062, 0.7711753845214844, 3.814697265625e-06),
    ( 10000, 8.0, 1e-06,  1, 8.0, 8.0, 7.62939453125e-06),
    ( 10000, 8.0, 1e-08,  1, 8.0, 8.0, 7.62939453125e-06),
    (100000, 0.5, 1e-08, 15, 0.008113570140595227, 0.008368687336682095, 3.484731540593744e-08),
    (100000, 2.0, 1e-08, 10, 0.058752742484051185, 0.06026366692500788, 2.0534444699058147e-07),
    (100000, 8.0, 1e-08,  1, 7.7857818603515625, 7.885139465332031, 7.62939453125e-06),
    (1000000, 0.5, 1e-08, 48, 0.002400300486893066, 0.002493885726421092, 1.0799127570739226e-08),
    (1000000, 2.0, 1e-08, 34, 0.01755782391904399, 0.01808265334468344, 6.856034299666135e-08),
    (1000000, 8.0, 1e-08,  1, 0.556621921560231, 0.5711386425149624, 1.037130881955511e-06),
]

_CACHE = {}


def ours(n, e0, delta, bound="upper"):
    key = (n, e0, delta, bound)
    if key not in _CACHE:
        _CACHE[key] = shuffle_epsilon(e0, n, delta, bound=bound, tolerance=TOLERANCE)
    return _CACHE[key]


def test_readme_example_of_the_authors_code():
    n, e0, delta = README_POINT
    upper, lower = ours(n, e0, delta), ours(n, e0, delta, "lower")
    # the exact ε lies in their bracket [lower − w, upper]; ours is within it, and tighter
    assert README_LOWER - README_WIDTH <= lower <= upper <= README_UPPER
    assert upper - lower < 0.01 * (README_UPPER - README_LOWER)
    # the closed form of Theorem 3.1 (ldpdist) is below their code's looser variant
    closed = shuffle_epsilon(e0, n, delta, method="closed_form")
    assert upper < closed < README_CLOSED
    assert closed == pytest.approx(README_CLOSED, rel=0.01)


@pytest.mark.parametrize("n, e0, delta, lo, hi", EXACT,
                         ids=[f"n{r[0]}-e{r[1]}-d{r[2]:g}" for r in EXACT])
def test_upper_bound_matches_the_exact_clone_epsilon(n, e0, delta, lo, hi):
    upper = ours(n, e0, delta)
    assert lo <= upper  # a valid upper bound: never below the exact ε
    # and tight to the stated precision (the bisection's relative tolerance; capped at ε₀)
    assert upper <= min(e0, hi * (1 + TOLERANCE) + 1e-15), (upper, hi)


LOWER_CASES = [r for r in EXACT if r[0] in (1_000, 1_000_000) and r[2] == 1e-8]


@pytest.mark.parametrize("n, e0, delta, lo, hi", LOWER_CASES,
                         ids=[f"n{r[0]}-e{r[1]}" for r in LOWER_CASES])
def test_lower_bound_is_below_the_exact_clone_epsilon(n, e0, delta, lo, hi):
    lower = ours(n, e0, delta, "lower")
    assert lower <= hi and lower >= lo * (1 - 2 * TOLERANCE), (lower, lo)


@pytest.mark.parametrize("n, e0, delta, step, their_lower, their_upper, width", BLOCKS,
                         ids=[f"n{r[0]}-e{r[1]}-d{r[2]:g}" for r in BLOCKS])
def test_inside_the_bracket_of_the_authors_procedure(n, e0, delta, step, their_lower,
                                                     their_upper, width):
    upper = ours(n, e0, delta)
    assert their_lower - width <= upper <= their_upper + TOLERANCE * upper + 1e-15


def test_exact_references_agree_with_the_authors_procedure():
    # the two references are consistent with each other (the exact ε inside their bracket)
    exact = {(n, e0, d): (lo, hi) for n, e0, d, lo, hi in EXACT}
    for n, e0, d, step, their_lower, their_upper, width in BLOCKS:
        lo, hi = exact[n, e0, d]
        assert their_lower - width <= hi and lo <= their_upper


# -- the properties of the issue, on the reference grid (δ = 10⁻⁸, n up to 10⁶) ----------------

NS = sorted({r[0] for r in EXACT})
E0S = sorted({r[1] for r in EXACT})


def test_monotone_in_n_and_in_epsilon0():
    delta = 1e-8
    for e0 in E0S:
        uppers = [ours(n, e0, delta) for n in NS]
        # decreasing in n (strictly, unless no amplification at all: ε = ε₀)
        assert all(b < a or a == b == e0 for a, b in zip(uppers, uppers[1:])), (e0, uppers)
    for n in NS:
        uppers = [ours(n, e0, delta) for e0 in E0S]
        assert all(b > a for a, b in zip(uppers, uppers[1:])), (n, uppers)


def test_never_below_the_lower_bounds_never_above_the_closed_form():
    delta, compared = 1e-8, 0
    for n in NS:
        for e0 in E0S:
            upper = ours(n, e0, delta)
            # the exact ε of shuffled binary randomized response: no generic bound is smaller
            assert shuffle_rr_epsilon(e0, n, delta, tolerance=1e-3) <= upper
            if closed_form_applies(e0, n, delta):
                compared += 1
                assert upper <= shuffle_epsilon(e0, n, delta, method="closed_form")
    for n, e0, d, *_ in LOWER_CASES:
        assert ours(n, e0, d, "lower") <= ours(n, e0, d)
    assert compared >= 12  # the closed form applies on much of the grid
