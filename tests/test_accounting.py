"""The privacy ledger (ldpdist.privacy.Campaign) and ``ldpdist privacy``."""

from __future__ import annotations

import json
import math

import pytest

import ldpdist
from ldpdist import cli
from ldpdist.privacy import (Campaign, CampaignReport, shuffle_epsilon,
                             shuffle_epsilon_for_channel)


class Stub:
    """A mechanism-like object with chosen ε attributes."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)


def by_hand(groups, slack):
    """Advanced composition written out: √(2 ln(1/δ′) Σ ε²) + Σ ε (e^ε − 1)."""
    squares = sum(times * eps * eps for eps, times in groups)
    drift = sum(times * eps * (math.exp(eps) - 1) for eps, times in groups)
    return math.sqrt(2 * math.log(1 / slack) * squares) + drift


# -- composition -------------------------------------------------------------------------

def test_basic_composition_is_the_exact_sum():
    report = Campaign(delta=1e-6).collect(0.3, times=10).collect(0.7, times=2).report()
    assert isinstance(report, CampaignReport)
    assert report.basic_epsilon == pytest.approx(4.4, rel=1e-15)
    assert report.basic_delta == 0.0
    assert [r.total_epsilon for r in report.collections] == pytest.approx([3.0, 1.4])
    assert report.counted == 12


@pytest.mark.parametrize("groups, delta", [
    ([(0.1, 1000)], 1e-6),                  # k ε-DP mechanisms: the DRV formula itself
    ([(0.2, 50), (0.05, 400)], 1e-5),       # heterogeneous
])
def test_advanced_composition_matches_the_formula(groups, delta):
    campaign = Campaign(delta=delta)
    for eps, times in groups:
        campaign.collect(eps, times=times)
    report = campaign.report()
    assert report.delta_slack == delta
    assert report.advanced_epsilon == pytest.approx(by_hand(groups, delta), rel=1e-12)
    assert report.advanced_delta == delta
    assert campaign.epsilon(method="advanced") == report.advanced_epsilon


def test_first_point_by_hand_numbers():
    # ε = 0.1, k = 1000, δ′ = 1e-6: √(2000 ln 10⁶) · 0.1 + 100 (e^0.1 − 1)
    expected = math.sqrt(2000 * 6 * math.log(10)) * 0.1 + 100 * math.expm1(0.1)
    assert Campaign(delta=1e-6).collect(0.1, times=1000).epsilon() == pytest.approx(
        expected, rel=1e-12)
    assert expected < 100  # so advanced composition is the one that applies


def test_the_best_rule_switches_at_the_crossover():
    eps, delta = 0.2, 1e-9
    crossover = 2 * math.log(1 / delta) / (2 - math.exp(eps)) ** 2
    below = math.floor(crossover)
    low = Campaign(delta=delta).collect(eps, times=below).report()
    high = Campaign(delta=delta).collect(eps, times=below + 1).report()
    assert low.method == "basic" and low.epsilon == low.basic_epsilon
    assert low.delta_used == 0.0
    assert high.method == "advanced" and high.epsilon == high.advanced_epsilon
    assert high.delta_used == delta
    assert high.epsilon < high.basic_epsilon
    assert "advanced composition" in high.reason


def test_large_epsilons_never_use_advanced_composition():
    report = Campaign().collect(math.log(2), times=10**6).report()
    assert report.method == "basic"
    assert "ln 2" in report.reason


def test_mixed_split_beats_both():
    delta = 1e-9
    report = (Campaign(delta=delta).collect(2.0, times=3, label="big")
              .collect(0.01, times=10_000, label="small").report())
    expected = 6.0 + by_hand([(0.01, 10_000)], delta)
    assert report.method == "mixed"
    assert report.epsilon == pytest.approx(expected, rel=1e-12)
    assert report.epsilon < min(report.basic_epsilon, report.advanced_epsilon)
    assert [r.composition for r in report.collections] == ["basic", "advanced"]


# -- memoized, shuffled, realized ----------------------------------------------------------

def test_memoized_costs_once():
    once = Campaign().collect(0.8, times=365, memoized=True)
    assert once.epsilon() == 0.8
    row = once.report().collections[0]
    assert (row.kind, row.counted, row.times) == ("memoized", 1, 365)
    fresh = Campaign().collect(0.8, times=365)
    assert fresh.epsilon() == pytest.approx(292.0)


def test_memoized_uses_epsilon_infinity_and_epsilon_1():
    mech = Stub(epsilon=3.0, realized_epsilon=3.0, epsilon_infinity=2.0, epsilon_1=0.5)
    year = Campaign().collect(mech, times=365, memoized=True).report().collections[0]
    assert (year.epsilon, year.source) == (2.0, "epsilon_infinity")
    single = Campaign().collect(mech, times=1, memoized=True).report().collections[0]
    assert (single.epsilon, single.source) == (0.5, "epsilon_1")
    with pytest.raises(ValueError, match="memoized=True"):
        Campaign().collect(mech, times=2)


def test_shuffled_uses_shuffle_epsilon_with_its_delta_share():
    delta, n = 1e-8, 10**5
    report = (Campaign(delta=delta).collect(1.0, times=4, shuffled_among=n)
              .collect(2.0, times=1, shuffled_among=float(n)).report())
    share = delta / (2 * 5)
    first, second = report.collections
    assert report.delta_per_shuffle == share and report.delta_slack == delta / 2
    assert first.epsilon == shuffle_epsilon(1.0, n, share)
    assert second.epsilon == shuffle_epsilon(2.0, n, share)
    assert first.epsilon < 1.0 and first.delta == share and first.kind == "shuffled"
    assert report.basic_epsilon == pytest.approx(4 * first.epsilon + second.epsilon)
    assert report.basic_delta == pytest.approx(delta / 2)
    assert report.advanced_delta == pytest.approx(delta)
    assert report.delta_used <= delta * (1 + 1e-12)


def test_memoized_reports_get_no_amplification():
    row = (Campaign().collect(1.0, times=30, memoized=True, shuffled_among=10**6)
           .report().collections[0])
    assert (row.kind, row.epsilon, row.counted) == ("memoized", 1.0, 1)
    assert "no amplification" in row.note


def test_realized_epsilon_is_used():
    stub = Stub(epsilon=1.0, realized_epsilon=0.8)
    row = Campaign().collect(stub, times=10).report().collections[0]
    assert (row.local_epsilon, row.source) == (0.8, "realized_epsilon")
    assert Campaign().collect(stub, times=10).epsilon(method="basic") == pytest.approx(8.0)
    plain = Campaign().collect(Stub(epsilon=0.4)).report().collections[0]
    assert (plain.local_epsilon, plain.source) == (0.4, "epsilon")
    mech = ldpdist.RandomizedResponse(10, 1.0)
    row = Campaign().collect(mech).report().collections[0]
    assert row.local_epsilon == mech.realized_epsilon and row.source == "realized_epsilon"
    assert row.label == "RandomizedResponse"


# -- bad input -------------------------------------------------------------------------------

@pytest.mark.parametrize("epsilon, error", [
    (0.0, ValueError), (-1.0, ValueError), (math.nan, ValueError), (math.inf, ValueError),
    ("1", TypeError), (True, TypeError), (None, TypeError)])
def test_bad_epsilon(epsilon, error):
    with pytest.raises(error, match="epsilon|collect"):
        Campaign().collect(epsilon)


def test_bad_mechanism_epsilon():
    with pytest.raises(ValueError, match="infinite"):
        Campaign().collect(Stub(epsilon=1.0, realized_epsilon=math.inf))
    with pytest.raises(ValueError, match="not locally differentially private"):
        Campaign().collect(Stub(epsilon=1.0, private=False))


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-9, 2.0, math.nan])
def test_bad_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        Campaign(delta=delta)


def test_bad_times_users_and_empty():
    with pytest.raises(ValueError, match="times"):
        Campaign().collect(1.0, times=0)
    with pytest.raises(TypeError, match="times"):
        Campaign().collect(1.0, times=1.5)
    with pytest.raises(ValueError, match="shuffled_among"):
        Campaign().collect(1.0, shuffled_among=1)
    with pytest.raises(TypeError, match="memoized"):
        Campaign().collect(1.0, memoized="yes")
    with pytest.raises(ValueError, match="no collections"):
        Campaign().report()
    with pytest.raises(ValueError, match="method"):
        Campaign().collect(1.0).epsilon(method="rdp")


# -- the command line -------------------------------------------------------------------------

@pytest.fixture
def spec(tmp_path):
    mech = ldpdist.RandomizedResponse(10, 0.5)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(mech.to_dict()))
    return str(path), mech


def test_cli_json(spec, capsys):
    path, mech = spec
    assert cli.main(["privacy", "--spec", path, "--collections", "365", "--users", "1e5",
                     "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["epsilon_realized"] == mech.realized_epsilon
    assert data["epsilon_source"] == "realized_epsilon"
    local, shuffled = data["local"], data["shuffled"]
    assert local["basic_epsilon"] == pytest.approx(365 * mech.realized_epsilon)
    assert local["advanced_epsilon"] == pytest.approx(
        by_hand([(mech.realized_epsilon, 365)], 1e-9), rel=1e-12)
    assert local["method"] == "advanced"
    # k-RR has a channel-specific bound below the generic one: it is counted, both are given
    generic = shuffle_epsilon(mech.realized_epsilon, 10**5, 1e-9 / 730)
    channel = shuffle_epsilon_for_channel(mech, 10**5, 1e-9 / 730)
    row = shuffled["collections"][0]
    assert (row["generic_epsilon"], row["channel_epsilon"]) == (generic, channel)
    assert channel < generic
    assert (row["epsilon"], row["shuffle_bound"]) == (channel, "channel")
    assert shuffled["epsilon"] < local["epsilon"]
    assert local["collections"][0]["shuffle_bound"] == ""


def test_cli_text_and_memoized(spec, capsys):
    path, mech = spec
    assert cli.main(["privacy", "--spec", path, "--collections", "365"]) == 0
    out = capsys.readouterr().out
    assert "basic composition:    ε = 182.5" in out
    assert "applies: advanced composition" in out
    assert cli.main(["privacy", "--spec", path, "--collections", "365", "--memoized",
                     "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["local"]["epsilon"] == mech.realized_epsilon


@pytest.mark.parametrize("args, message", [
    (["--collections", "0"], "--collections"),
    (["--users", "1"], "--users"),
    (["--delta", "1.5"], "--delta"),
    (["--collections", "many"], "--collections"),
])
def test_cli_errors_are_one_line(spec, capsys, args, message):
    path, _ = spec
    assert cli.main(["privacy", "--spec", path, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ldpdist privacy: error:") and message in err
    assert err.count("\n") == 1


def test_cli_missing_spec(tmp_path, capsys):
    assert cli.main(["privacy", "--spec", str(tmp_path / "none.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_longitudinal_mechanisms_are_read(tmp_path, capsys):
    longitudinal = pytest.importorskip("ldpdist.longitudinal")
    mech = longitudinal.LongitudinalGRR(k=4, epsilon_infinity=2.0, epsilon_1=1.0)
    year = Campaign().collect(mech, times=365, memoized=True).report().collections[0]
    assert (year.epsilon, year.source) == (mech.epsilon_infinity, "epsilon_infinity")
    once = Campaign().collect(mech, memoized=True).report().collections[0]
    assert (once.epsilon, once.source) == (mech.epsilon_1, "epsilon_1")
    with pytest.raises(ValueError, match="memoized=True"):
        Campaign().collect(mech, times=365)
    path = tmp_path / "lgrr.json"
    path.write_text(json.dumps(mech.to_dict()))
    assert cli.main(["privacy", "--spec", str(path), "--collections", "365", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["memoized"] is True and data["local"]["epsilon"] == mech.epsilon_infinity


# -- shuffled collections: the best valid amplification bound ---------------------------------

def test_shuffled_mechanism_counts_its_channel_bound_when_smaller():
    # k-RR: clone probability 2/(e^ε₀ + 1) > e^−ε₀, so its own bound is below the generic one
    delta, n = 1e-9, 10**5
    mech = ldpdist.RandomizedResponse(16, 1.0)
    report = Campaign(delta=delta).collect(mech, times=30, shuffled_among=n).report()
    share = delta / (2 * 30)
    row = report.collections[0]
    generic = shuffle_epsilon(mech.realized_epsilon, n, share)
    channel = shuffle_epsilon_for_channel(mech, n, share)
    assert channel < 0.9 * generic  # a real gain, not rounding
    assert (row.generic_epsilon, row.channel_epsilon) == (generic, channel)
    assert (row.epsilon, row.shuffle_bound) == (channel, "channel")
    assert report.basic_epsilon == pytest.approx(30 * channel, rel=1e-12)
    assert "channel-specific bound" in row.note and f"{generic:.6g}" in row.note
    assert report.to_dict()["collections"][0]["shuffle_bound"] == "channel"


def test_shuffled_mechanism_without_gain_counts_the_generic_bound():
    # unary encoding with k ≥ 3: clone probability e^−ε₀, the same as the generic analysis
    delta, n = 1e-9, 10**5
    mech = ldpdist.OptimizedUnaryEncoding(16, 1.0)
    row = Campaign(delta=delta).collect(mech, times=2, shuffled_among=n).report().collections[0]
    generic = shuffle_epsilon(mech.realized_epsilon, n, delta / 4)
    assert row.generic_epsilon == generic and row.channel_epsilon is not None
    assert row.channel_epsilon == pytest.approx(generic, rel=1e-3)
    assert row.epsilon == min(generic, row.channel_epsilon)
    assert row.shuffle_bound == ("channel" if row.channel_epsilon < generic else "generic")


@pytest.mark.parametrize("source", [1.0, Stub(epsilon=1.0, realized_epsilon=1.0)])
def test_shuffled_without_clone_parameters_counts_the_generic_bound(source):
    # a bare ε, or a mechanism without closed-form clone parameters: the generic bound only
    row = (Campaign(delta=1e-9).collect(source, times=3, shuffled_among=10**5)
           .report().collections[0])
    assert row.channel_epsilon is None and row.shuffle_bound == "generic"
    assert row.epsilon == row.generic_epsilon == shuffle_epsilon(1.0, 10**5, 1e-9 / 6)
    assert "no closed-form channel-specific bound" in row.note


def test_rows_that_are_not_shuffled_have_no_shuffle_bound():
    mech = ldpdist.RandomizedResponse(4, 1.0)
    report = (Campaign().collect(mech, times=3)
              .collect(mech, times=3, memoized=True, shuffled_among=10**5).report())
    for row in report.collections:
        assert (row.shuffle_bound, row.generic_epsilon, row.channel_epsilon) == ("", None, None)


def test_cli_text_names_the_bound_counted(spec, capsys):
    path, mech = spec
    assert cli.main(["privacy", "--spec", path, "--collections", "10", "--users", "1e5"]) == 0
    out = capsys.readouterr().out
    channel = shuffle_epsilon_for_channel(mech, 10**5, 1e-9 / 20)
    assert f"the channel-specific bound {channel:.6g}" in out and "is counted" in out
