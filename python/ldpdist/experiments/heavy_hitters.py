"""The ``heavy-hitters`` preset: the heavy-hitter protocols of :mod:`ldpdist.heavy_hitters`
on Zipf-distributed random words, scored on the top t = 32 items.

Data (our own generator, :func:`vocabulary` and :func:`draw_users`): a vocabulary of
:data:`VOCABULARY` distinct random words (lowercase ASCII letters, lengths uniform in 3..32,
drawn from a seeded numpy generator; a duplicate is redrawn), the word of rank i (0-based,
the vocabulary's order) with probability ``p_i ∝ (i + 1)^-s`` (Zipf(s)), s ∈ {1.1, 1.5};
n users, each drawing a word independently from p. Within a run the same users (one draw
per (s, n)) serve every protocol and ε.

The vocabulary is hashed once with each protocol's public hash (``protocol.hash``, the
items hash of :mod:`ldpdist.heavy_hitters.items`) and the users' reports are drawn from
their hashed values (``protocol.privatize_hashed``): exactly what ``privatize`` on the
words would produce, without hashing n strings. Scores are taken on the hashed values
(with the protocols' 64-bit default no two words of the vocabulary collide, which
:func:`run_protocol` checks):

* ``precision``, ``recall``, ``f1``: of the hashed values returned by ``identify(top=t)``
  against the true top t (the t values held by the most users; ties broken by rank);
  precision is 0 when nothing is returned;
* ``l1``: ``Σ |f̂_x − f_x|`` over the values returned, f the users' own frequencies
  (counts / n; 0 for a value no user holds) and f̂ the protocol's estimate;
* ``found``: how many values ``identify`` returned;
* ``seconds``: the server's time, ``aggregator().add(reports)`` plus ``identify``
  (privatization is not counted).

Protocols: :data:`PROTOCOLS`, one list of :class:`Entry` (name, factory
``(epsilon, top, seed) -> protocol`` with the protocol's defaults, and whether ``identify``
is given the vocabulary as its candidate dictionary: column ``candidates``). A protocol
whose module is not there is left out. SFP, which privatizes the words themselves (its
reports carry fragments of them), is given their alphabet (:data:`ALPHABET`).

Outputs: ``heavy-hitters.csv`` (one row per protocol, s, n, ε and run; columns
:data:`COLUMNS`) and ``heavy-hitters.png``: F1 against ε, one panel per (s, n), one curve
per protocol. Full grid: n ∈ {10^5, 10^6, 10^7}, ε ∈ {1, 2, 4}, 3 runs; ``--quick``:
n ∈ {10^5, 10^6}, one run; ``--tiny``: a test grid (a vocabulary of 500 words, n = 20 000,
ε = 4, s = 1.1, t = 8).
"""

from __future__ import annotations

import importlib
import inspect
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .results import read_typed_csv, write_csv

DESCRIPTION = ("Heavy hitters on Zipf(1.1) and Zipf(1.5) random words (a vocabulary of "
               "10 000): precision, recall and F1 of the top 32, l1 error of the frequencies "
               "found and the server's time per protocol, n = 10^5..10^7, eps = 1, 2, 4 "
               "(runs inline: --jobs has no effect)")

COLUMNS = ("protocol", "candidates", "distribution", "s", "vocabulary", "top", "epsilon", "n",
           "run", "found", "precision", "recall", "f1", "l1", "seconds")
TOP = 32
VOCABULARY = 10_000
MIN_LENGTH, MAX_LENGTH = 3, 32
EXPONENTS = (1.1, 1.5)
# full / quick / tiny
_NS = ((100_000, 1_000_000, 10_000_000), (100_000, 1_000_000), (20_000,))
_EPSILONS = ((1.0, 2.0, 4.0), (1.0, 2.0, 4.0), (4.0,))
_EXPONENTS = (EXPONENTS, EXPONENTS, (1.1,))
_VOCABULARY = (VOCABULARY, VOCABULARY, 500)
_TOPS = (TOP, TOP, 8)
_RUNS = (3, 1, 1)
#: The letters of the words; SFP is told it (its server then searches the fragments over
#: these 26 letters instead of all 256 byte values).
ALPHABET = "abcdefghijklmnopqrstuvwxyz"
_LETTERS = np.frombuffer(ALPHABET.encode("ascii"), dtype=np.uint8)


# -- the protocols -------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """A protocol of the preset: ``factory(epsilon, top, seed)`` builds it with its
    defaults (``seed``: the public seed of its item hash); ``candidates``: its ``identify``
    needs a dictionary of candidate items (it is given the vocabulary)."""

    name: str
    factory: Callable[[float, int, int], Any]
    candidates: bool = False


def _build(cls: Any, epsilon: float, top: int, seed: int, **fixed: Any) -> Any:
    """``cls(epsilon, top=top, seed=seed, **fixed)``, passing ``top`` and ``seed`` only if
    the constructor takes them."""
    parameters = inspect.signature(cls).parameters
    kwargs = dict(fixed)
    if "top" in parameters:
        kwargs["top"] = top
    if "seed" in parameters:
        kwargs["seed"] = seed
    return cls(epsilon, **kwargs)


def _optional(name: str, module: str, classes: Sequence[str], candidates: bool = False,
              **fixed: Any) -> Optional[Entry]:
    """The entry of the first of ``classes`` found in ``ldpdist.heavy_hitters.<module>``,
    or None when the module is not there (or does not import)."""
    try:
        loaded = importlib.import_module(f"ldpdist.heavy_hitters.{module}")
    except Exception:  # noqa: BLE001 - absent, or broken while being written: left out
        return None
    found = next((getattr(loaded, c) for c in classes if hasattr(loaded, c)), None)
    if found is None:
        return None
    return Entry(name, lambda epsilon, top, seed: _build(found, epsilon, top, seed, **fixed),
                 candidates)


def _available() -> List[Entry]:
    wanted = [("PEM", "pem", ("PEM",), False),
              ("TreeHist", "treehist", ("TreeHist",), False),
              ("CMS", "sketch", ("CountMeanSketch",), True, {"hadamard": False}),
              ("HCMS", "sketch", ("CountMeanSketch",), True, {"hadamard": True}),
              ("SFP", "sfp", ("SequenceFragmentPuzzle",), False, {"alphabet": ALPHABET}),
              ("Compressive", "compressive", ("CompressiveHeavyHitters",), False)]
    entries = [_optional(*spec[:4], **(spec[4] if len(spec) > 4 else {})) for spec in wanted]
    return [entry for entry in entries if entry is not None]


#: The protocols run, in this order (a list: append an :class:`Entry` to add one).
PROTOCOLS: List[Entry] = _available()


def privatize_hashed(protocol: Any, values: np.ndarray, seed: int,
                     items: Optional[Callable[[], List[Any]]] = None) -> Any:
    """The reports of users holding the hashed values ``values`` (``protocol.hash`` of
    their items): ``protocol.privatize_hashed`` where the protocol has it; for a
    :class:`~ldpdist.heavy_hitters.PEM` without it, the same sampler as ``PEM.privatize``
    (so the same reports as ``privatize`` on the items, for the same seed). A protocol
    whose reports need more than the hash (its ``privatize_hashed`` raises ``TypeError``,
    e.g. SFP) privatizes the items themselves, ``items()``."""
    method = getattr(protocol, "privatize_hashed", None)
    if method is not None:
        try:
            return method(values, seed=seed)
        except TypeError:
            if items is None:
                raise
            return protocol.privatize(items(), seed=seed)
    from ..heavy_hitters import pem as pem_module
    from ..typed_reports import Reports

    if not isinstance(protocol, pem_module.PEM):
        raise TypeError(f"{type(protocol).__name__} has no privatize_hashed")
    pem = protocol
    values = np.asarray(values, dtype=np.uint64)
    n = values.size
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))
    out = np.zeros(n, dtype=pem._dtype)
    shifts = np.array([pem.bits - s for s in pem.prefix_bits], dtype=np.uint64)
    digits = np.array(pem.digits)
    t_max, G, g = pem._dtype["a"].shape[0], pem.groups, pem.g
    for start in range(0, n, pem_module._CHUNK):
        v = values[start:start + pem_module._CHUNK]
        m = v.size
        group = rng.integers(0, G, size=m, dtype=np.uint8)
        a = rng.integers(0, g, size=(m, t_max), dtype=np.uint8)
        a[np.arange(t_max)[None, :] >= digits[group][:, None]] = 0
        h = pem._hash_digits(v >> shifts[group], a)
        keep = rng.integers(0, pem_module._UNIT, size=m, dtype=np.uint64) < np.uint64(pem._M)
        other = rng.integers(1, g, size=m, dtype=np.uint64)
        y = np.where(keep, h, (h + other) % np.uint64(g))
        block = out[start:start + m]
        block["group"], block["y"], block["a"] = group, y.astype(np.uint8), a
    return Reports._tagged(out, *pem._report_provenance())


# -- the data ------------------------------------------------------------------------------

def _rng(seed: int, *parts: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, *parts]))


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**63))


def vocabulary(size: int, rng: np.random.Generator) -> List[str]:
    """``size`` distinct random words: lowercase ASCII letters, lengths uniform in
    ``MIN_LENGTH..MAX_LENGTH`` (3..32); a word already drawn is drawn again."""
    words: List[str] = []
    seen = set()
    while len(words) < size:
        need = size - len(words)
        lengths = rng.integers(MIN_LENGTH, MAX_LENGTH + 1, size=need)
        letters = _LETTERS[rng.integers(0, 26, size=int(lengths.sum()))].tobytes()
        ends = np.cumsum(lengths)
        for end, length in zip(ends.tolist(), lengths.tolist()):
            word = letters[end - length:end].decode("ascii")
            if word not in seen:
                seen.add(word)
                words.append(word)
    return words


def zipf(size: int, s: float) -> np.ndarray:
    """Zipf(s) over ranks 0..size-1: ``p_i ∝ (i + 1)^-s``."""
    weights = (np.arange(size) + 1.0) ** -s
    return weights / weights.sum()


def draw_users(n: int, p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The vocabulary index of each of n users, drawn independently from p."""
    return rng.choice(p.size, size=n, p=p)


# -- the metrics ---------------------------------------------------------------------------

def true_top(counts: np.ndarray, top: int) -> np.ndarray:
    """Indices of the ``top`` largest counts, ties broken by the smaller index (rank)."""
    return np.argsort(-counts, kind="stable")[:top]


def scores(found: Sequence[int], estimates: Sequence[float], truth: Sequence[int],
           frequency: Callable[[int], float]) -> Dict[str, float]:
    """``precision``, ``recall``, ``f1`` of the values ``found`` against the set ``truth``,
    and ``l1`` = ``Σ |estimate − frequency(value)|`` over the values found."""
    found = [int(x) for x in found]
    hits = len(set(found) & {int(x) for x in truth})
    precision = hits / len(found) if found else 0.0
    recall = hits / len(truth) if len(truth) else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    l1 = float(sum(abs(float(e) - frequency(x)) for x, e in zip(found, estimates)))
    return {"precision": precision, "recall": recall, "f1": f1, "l1": l1}


def serve(entry: Entry, protocol: Any, reports: Any, top: int, words: List[str]) -> Any:
    """The server's work on one batch: aggregate, then identify the top values (with the
    vocabulary as the dictionary for the protocols that need candidates)."""
    aggregator = protocol.aggregator()
    aggregator.add(reports)
    if entry.candidates:
        return aggregator.identify(top=top, candidates=words)
    return aggregator.identify(top=top)


def run_protocol(entry: Entry, epsilon: float, top: int, words: List[str], users: np.ndarray,
                 counts: np.ndarray, seed: int, hash_seed: int = 0) -> Dict[str, Any]:
    """One protocol at one ε on one population (``users``: vocabulary indices, ``counts``
    their histogram): the metrics of the module docstring."""
    protocol = entry.factory(epsilon, top, hash_seed)
    hashed = np.asarray(protocol.hash(words), dtype=np.uint64)
    order = np.argsort(hashed)
    if np.any(hashed[order][1:] == hashed[order][:-1]):
        raise ValueError(f"{entry.name}: two words of the vocabulary share a hashed value")
    n = int(users.size)
    reports = privatize_hashed(protocol, hashed[users], seed,
                               items=lambda: [words[i] for i in users.tolist()])
    start = time.perf_counter()
    result = serve(entry, protocol, reports, top, words)
    seconds = time.perf_counter() - start
    found = np.asarray(result.hashes, dtype=np.uint64)
    sorted_hashes = hashed[order]
    sorted_freq = counts[order] / n

    def frequency(value: int) -> float:
        i = int(np.searchsorted(sorted_hashes, np.uint64(value)))
        return float(sorted_freq[i]) if i < sorted_hashes.size and \
            int(sorted_hashes[i]) == value else 0.0

    row = scores(found.tolist(), np.asarray(result.estimates).tolist(),
                 hashed[true_top(counts, top)].tolist(), frequency)
    row.update(found=int(found.size), seconds=seconds)
    return row


def rows_for(ns: Sequence[int], epsilons: Sequence[float], exponents: Sequence[float],
             size: int, top: int, runs: int, seed: int,
             protocols: Optional[Sequence[Entry]] = None) -> Iterator[Dict[str, Any]]:
    """Every row of the study (see the module docstring)."""
    protocols = PROTOCOLS if protocols is None else protocols
    for run in range(runs):
        words = vocabulary(size, _rng(seed, run))
        for si, s in enumerate(exponents):
            p = zipf(size, s)
            for ni, n in enumerate(ns):
                users = draw_users(n, p, _rng(seed, run, si, ni, 1))
                counts = np.bincount(users, minlength=size)
                for pi, entry in enumerate(protocols):
                    for eps in epsilons:
                        privatize_seed = _seed(_rng(seed, run, si, ni, 2, pi, int(eps * 1000)))
                        metrics = run_protocol(entry, eps, top, words, users, counts,
                                               privatize_seed)
                        yield {"protocol": entry.name,
                               "candidates": "vocabulary" if entry.candidates else "",
                               "distribution": f"Zipf({s:g})", "s": s, "vocabulary": size,
                               "top": top, "epsilon": eps, "n": n, "run": run, **metrics}


def write(rows: Sequence[Dict[str, Any]], path: str) -> None:
    write_csv(rows, path, columns=COLUMNS)


def read(path: str) -> List[Dict[str, Any]]:
    """Rows of :func:`write` with the numbers converted back."""
    return read_typed_csv(path, ("vocabulary", "top", "n", "run", "found"),
                          ("s", "epsilon", "precision", "recall", "f1", "l1", "seconds"))


def means(rows: Sequence[Dict[str, Any]], metric: str
          ) -> Dict[Tuple[str, str, int, float], float]:
    """Mean of ``metric`` over the runs per (protocol, distribution, n, ε)."""
    data: Dict[Tuple[str, str, int, float], List[float]] = {}
    for row in rows:
        key = (row["protocol"], row["distribution"], int(row["n"]), float(row["epsilon"]))
        data.setdefault(key, []).append(float(row[metric]))
    return {key: float(np.mean(values)) for key, values in data.items()}


def summary(rows: Sequence[Dict[str, Any]]) -> str:
    """Mean F1 and server time per protocol and setting."""
    f1, seconds = means(rows, "f1"), means(rows, "seconds")
    lines = [f"  {p:>12} {d:>10} n={n:<9} eps={e:g}: F1 {f1[key]:.3f}, "
             f"server {seconds[key]:.2f} s"
             for key in f1 for p, d, n, e in [key]]
    return "mean F1 of the top t and server time (add + identify):\n" + "\n".join(lines)


# -- the figure ----------------------------------------------------------------------------

_LOOKS = {"PEM": ("tab:blue", "o"), "TreeHist": ("tab:orange", "s"),
          "CMS": ("tab:green", "^"), "HCMS": ("tab:olive", "v"), "SFP": ("tab:red", "D"),
          "Compressive": ("tab:purple", "*")}
_SPARE = [("tab:brown", "P"), ("tab:pink", "X"), ("tab:gray", "<"), ("tab:cyan", ">")]


def protocol_look(name: str, index: int = 0) -> Dict[str, Any]:
    """Keyword arguments of ``Axes.plot`` for a protocol's curve."""
    color, marker = _LOOKS.get(name, _SPARE[index % len(_SPARE)])
    return dict(color=color, marker=marker, linestyle="-", markersize=6, linewidth=1.4)


def figure(rows: Sequence[Dict[str, Any]], title: str = "heavy-hitters"):
    """One panel per (s, n): mean F1 over the runs against ε, one curve per protocol, the
    min–max band over the runs; in the style of every ``ldpdist reproduce`` figure."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    from .plotting import (_runs_text, finish, legend_columns, statistics_handles,
                           style_panel, subplots)

    dists = list(dict.fromkeys(row["distribution"] for row in rows))
    ns = sorted({int(row["n"]) for row in rows})
    names = list(dict.fromkeys(row["protocol"] for row in rows))
    panels = [(d, n) for d in dists for n in ns]
    fig, axes = subplots(len(panels), max(1, len(ns)), sharey=True)
    run_counts: List[int] = []
    for index, (ax, (dist, n)) in enumerate(zip(axes, panels)):
        here = [row for row in rows if row["distribution"] == dist and int(row["n"]) == n]
        for pi, name in enumerate(names):
            data: Dict[float, List[float]] = {}
            for row in here:
                if row["protocol"] == name:
                    data.setdefault(float(row["epsilon"]), []).append(float(row["f1"]))
            if not data:
                continue
            eps = sorted(data)
            run_counts.extend(len(data[e]) for e in eps)
            look = protocol_look(name, pi)
            ax.plot(eps, [np.mean(data[e]) for e in eps], **look)
            if len(eps) > 1:
                ax.fill_between(eps, [min(data[e]) for e in eps], [max(data[e]) for e in eps],
                                color=look["color"], alpha=0.08, linewidth=0)
        ax.set_xscale("log", base=2)
        ticks = sorted({float(row["epsilon"]) for row in here})
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylim(-0.03, 1.03)
        users = f"{n:,}".replace(",", " ")
        style_panel(ax, index, f"{dist}, n = {users}", "ε",
                    f"F1 of the top {here[0]['top']}" if index % max(1, len(ns)) == 0
                    else None)
    group = [(Line2D([], [], **protocol_look(name, pi)),
              name + (" (vocabulary as candidates)"
                      if any(r["protocol"] == name and r["candidates"] for r in rows) else ""))
             for pi, name in enumerate(names)]
    runs = _runs_text(run_counts)
    handles, labels = statistics_handles(runs)
    handles, labels, legend_rows = legend_columns([group], list(zip(handles, labels)))
    size = rows[0]["vocabulary"] if rows else 0
    finish(fig, handles, labels, legend_rows, title,
           f"line: mean over {runs}; band: min–max over the runs; {size} random words, "
           "Zipf(s) frequencies; hashed values scored against the true top t")
    return fig


def run(out: str, *, quick: bool = False, tiny: bool = False, runs: Optional[int] = None,
        seed: int = 0) -> Tuple[str, str, List[Dict[str, Any]], str]:
    """Run the study; write ``<out>/heavy-hitters.csv`` and ``.png``; returns the paths, the
    rows and a summary for the terminal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = 2 if tiny else 1 if quick else 0
    count = runs if runs is not None else _RUNS[size]
    rows = list(rows_for(_NS[size], _EPSILONS[size], _EXPONENTS[size], _VOCABULARY[size],
                         _TOPS[size], count, seed))
    csv_path = os.path.join(out, "heavy-hitters.csv")
    png_path = os.path.join(out, "heavy-hitters.png")
    write(rows, csv_path)
    fig = figure(rows, title="heavy-hitters" + (" [tiny: test grid]" if tiny else
                                                " [quick]" if quick else ""))
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return csv_path, png_path, rows, summary(rows)
