"""Heavy hitters side by side: ldpdist's protocols against pure-LDP's (PEM, TreeHist, CMS/HCMS,
SFP) on the same users and ε, F1 of the top t, ℓ1 error of the frequencies found, and time.

Data: the generator of the ``heavy-hitters`` preset (:mod:`ldpdist.experiments.heavy_hitters`):
a vocabulary of random lowercase words (3 to 32 letters), Zipf(s) frequencies over it, n users
drawing a word each. Both libraries see the same users.

* ldpdist: every protocol of the preset's registry (``PROTOCOLS``: PEM, TreeHist, CMS/HCMS,
  SFP, compressive; those not implemented yet are skipped), with their defaults except the
  width of the hashed domain of the prefix-tree protocols: PEM and TreeHist descend the
  same ``--bits`` (default 32) hashed values as pure-LDP's (``bits=32``: the first 32 bits of
  the same 64-bit item hash, so both libraries see identical values; ``--bits 64`` runs
  their 64-bit default, whose groups, about twice as many, hold fewer users each). From the
  words' hashed values (``privatize_hashed``; SFP privatizes the words and is told their
  alphabet, the 26 lowercase letters). The sketches (CMS/HCMS) are given the vocabulary as
  candidates.
* pure-LDP 1.2.0 (``pip install pure-ldp``; the ``bench`` extra): PEM, TreeHist and SFP work
  on strings over an alphabet, and their default OLH oracle loops over the whole domain for
  each report, so they run here on the 32-bit item hash of each word written as a string of
  32 binary digits, with pure-LDP's count-mean sketch as their frequency oracle (as pure-LDP's
  own heavy-hitter experiments do; ``--cms-k`` hash functions, ``--cms-m`` columns). PEM:
  start 5 bits, 3 bits per round; TreeHist: 4 bits per round; SFP: 2-bit fragments. Their
  CMS and HCMS estimate every word of the vocabulary (candidates) and keep the t largest.
  Found values are compared by hashed value (32 bits for theirs and for our PEM and
  TreeHist, 64 for our other protocols; the script checks that no two words collide).

F1 and ℓ1 are means over seeded runs (``--runs`` of pure-LDP's, ``--our-runs`` of ours: ours
cost little, so more of them) on the same users; F1 is given as mean ± its standard error
(sample standard deviation / √runs), and ΔF1 = ours − theirs ± the standard error of the
difference (√(se₁² + se₂²)): "at least theirs" is read against that noise.

Times, both per setting (means over the runs): the *clients*
(privatizing every user: pure-LDP's ``privatise`` per user; ldpdist's ``privatize_hashed``)
and the *server* (aggregating every report and identifying: pure-LDP's ``aggregate`` and
``find_heavy_hitters`` / ``estimate_all``; ldpdist's ``aggregator().add`` + ``identify``).
The data preparation (hashing the vocabulary, the users' strings) is not timed. Speed-ups are
theirs / ours.

Usage::

    python benches/heavy_hitters_peers.py          # n = 10^5, eps = 1, 4, s = 1.1, 1.5 (~8 min)
    python benches/heavy_hitters_peers.py --n 1000000 --epsilon 1,2,4 --s 1.1,1.5
    python benches/heavy_hitters_peers.py --protocols PEM,CMS --out table.md
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ldpdist.experiments import heavy_hitters as hh
from ldpdist.heavy_hitters import hash_items

PEER_BITS = 32
PEERS = ("PEM", "TreeHist", "CMS", "HCMS", "SFP")
#: Our protocols run on ``--bits`` hashed bits (pure-LDP's prefix-tree domain) in this bench.
PREFIX_TREES = ("PEM", "TreeHist")


def with_bits(entry: hh.Entry, bits: int) -> hh.Entry:
    """``entry`` with its protocol built on a ``bits``-bit hashed domain (PEM, TreeHist);
    other entries unchanged."""
    if entry.name not in PREFIX_TREES:
        return entry
    cls = type(entry.factory(4.0, hh.TOP, 0))
    return hh.Entry(entry.name,
                    lambda epsilon, top, seed: hh._build(cls, epsilon, top, seed, bits=bits),
                    entry.candidates)


# -- ours ----------------------------------------------------------------------------------

def run_ours(entry: hh.Entry, epsilon: float, top: int, words: List[str], users: np.ndarray,
             counts: np.ndarray, seed: int) -> Dict[str, float]:
    protocol = entry.factory(epsilon, top, 0)
    hashed = np.asarray(protocol.hash(words), dtype=np.uint64)
    if np.unique(hashed).size != hashed.size:
        raise SystemExit(f"{entry.name}: two words share a hashed value: change --seed")
    values = hashed[users]
    start = time.perf_counter()
    reports = hh.privatize_hashed(protocol, values, seed,
                                  items=lambda: [words[i] for i in users.tolist()])
    privatized = time.perf_counter()
    result = hh.serve(entry, protocol, reports, top, words)
    end = time.perf_counter()
    frequencies = dict(zip(hashed.tolist(), (counts / users.size).tolist()))
    row = hh.scores(np.asarray(result.hashes).tolist(), np.asarray(result.estimates).tolist(),
                    hashed[hh.true_top(counts, top)].tolist(),
                    lambda x: frequencies.get(x, 0.0))
    row.update(server=end - privatized, client=privatized - start, found=len(result.hashes))
    return row


# -- theirs --------------------------------------------------------------------------------

def _compatibility_shims() -> None:
    """pure-LDP 1.2.0 predates two changes of its dependencies; give its modules what they
    expect (nothing else changes):

    * it calls ``np.zeros(None)`` for oracles without a domain size (the sketches), a 0-d
      array in numpy < 2.4 and an error since: its server base class gets a numpy whose
      ``zeros(None)`` is ``zeros(())``;
    * it hashes ``str`` with xxhash, which xxhash 4 refuses: its modules get an xxhash
      whose ``xxh32``/``xxh64`` encode a ``str`` argument as UTF-8 first."""
    import types

    import xxhash
    from pure_ldp.core import _freq_oracle_server as base

    if not getattr(base.np, "_ldpdist_shim", False):
        shim = types.ModuleType("numpy_shim")
        shim.__dict__.update({k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
        shim.zeros = lambda shape, *a, **kw: np.zeros(() if shape is None else shape, *a,
                                                      **kw)
        shim._ldpdist_shim = True
        base.np = shim

    def encoded(function: Any) -> Any:
        return lambda data, *a, **kw: function(
            data.encode("utf-8") if isinstance(data, str) else data, *a, **kw)

    hashes = types.ModuleType("xxhash_shim")
    hashes.__dict__.update({k: getattr(xxhash, k) for k in dir(xxhash)
                            if not k.startswith("__")})
    hashes.xxh32, hashes.xxh64 = encoded(xxhash.xxh32), encoded(xxhash.xxh64)
    for name, module in list(sys.modules.items()):
        if name.startswith("pure_ldp") and getattr(module, "xxhash", None) is xxhash:
            module.xxhash = hashes


def _pure_ldp() -> Optional[Any]:
    try:
        import pure_ldp  # noqa: F401
        from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
        from pure_ldp.heavy_hitters.apple_sfp import SFPClient, SFPServer
        from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer
        from pure_ldp.heavy_hitters.treehistogram import TreeHistClient, TreeHistServer
    except ImportError as exc:
        print(f"pure-LDP is not installed ({exc}): `pip install pure-ldp` (it also imports "
              "scikit-learn and statsmodels) to compare; running ldpdist only",
              file=sys.stderr)
        return None
    _compatibility_shims()
    return dict(CMSClient=CMSClient, CMSServer=CMSServer, SFPClient=SFPClient,
                SFPServer=SFPServer, PEMClient=PEMClient, PEMServer=PEMServer,
                TreeHistClient=TreeHistClient, TreeHistServer=TreeHistServer)


def _theirs_objects(lib: Dict[str, Any], name: str, epsilon: float, top: int, k: int,
                    m: int) -> Tuple[Any, Any]:
    """(client, server) of pure-LDP's ``name``."""
    cms_server = lib["CMSServer"](epsilon, k, m, is_hadamard=(name == "HCMS"))
    cms_client = lib["CMSClient"](epsilon, cms_server.get_hash_funcs(), m,
                                  is_hadamard=(name == "HCMS"))
    if name in ("CMS", "HCMS"):
        return cms_client, cms_server
    binary = ["0", "1"]
    if name == "PEM":
        client = lib["PEMClient"](epsilon, start_length=5, max_string_length=PEER_BITS,
                                  fragment_length=3, alphabet=binary, fo_client=cms_client)
        server = lib["PEMServer"](epsilon, start_length=5, max_string_length=PEER_BITS,
                                  fragment_length=3, alphabet=binary, fo_server=cms_server)
    elif name == "TreeHist":
        client = lib["TreeHistClient"](epsilon, fragment_length=4,
                                       max_string_length=PEER_BITS, alphabet=binary,
                                       fo_client=cms_client)
        server = lib["TreeHistServer"](epsilon, max_string_length=PEER_BITS,
                                       fragment_length=4, alphabet=binary, fo_server=cms_server)
    elif name == "SFP":
        client = lib["SFPClient"](epsilon, fragment_length=2, max_string_length=PEER_BITS,
                                  alphabet={"0", "1"}, fo_client=cms_client)
        server = lib["SFPServer"](epsilon, fragment_length=2, max_string_length=PEER_BITS,
                                  alphabet={"0", "1"}, fo_server=cms_server)
    else:
        raise ValueError(name)
    return client, server


def run_theirs(lib: Dict[str, Any], name: str, epsilon: float, top: int, words: List[str],
               users: np.ndarray, counts: np.ndarray, seed: int, k: int,
               m: int) -> Dict[str, float]:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    hashed = hash_items(words, 0) >> np.uint64(64 - PEER_BITS)
    if np.unique(hashed).size != hashed.size:
        raise SystemExit(f"two words share a {PEER_BITS}-bit hash: change --seed")
    if name in ("CMS", "HCMS"):
        data = [words[i] for i in users.tolist()]
    else:
        strings = [format(int(h), f"0{PEER_BITS}b") for h in hashed]
        data = [strings[i] for i in users.tolist()]
    client, server = _theirs_objects(lib, name, epsilon, top, k, m)
    start = time.perf_counter()
    reports = [client.privatise(x) for x in data]
    privatized = time.perf_counter()
    for report in reports:
        server.aggregate(report)
    if name in ("CMS", "HCMS"):
        estimates = np.asarray(server.estimate_all(words, suppress_warnings=True))
        best = np.argsort(-estimates, kind="stable")[:top]
        found = [int(hashed[i]) for i in best]
        values = estimates[best].tolist()
    else:
        strings_found, values = server.find_heavy_hitters(k=top)
        found = [int(s.replace("*", "") or "0", 2) for s in strings_found]
        values = list(values)
    end = time.perf_counter()
    frequencies = dict(zip(hashed.tolist(), (counts / users.size).tolist()))
    n = users.size
    row = hh.scores(found, [v / n for v in values], hashed[hh.true_top(counts, top)].tolist(),
                    lambda x: frequencies.get(x, 0.0))
    row.update(server=end - privatized, client=privatized - start, found=len(found))
    return row


def _mean(rows: List[Dict[str, float]]) -> Dict[str, float]:
    """Means over the runs, and ``<key>_se``: the standard error of each mean (the sample
    standard deviation over √runs; NaN for one run)."""
    out: Dict[str, float] = {}
    for key in rows[0]:
        values = np.array([row[key] for row in rows], dtype=float)
        out[key] = float(values.mean())
        out[key + "_se"] = (float(values.std(ddof=1) / np.sqrt(values.size))
                            if values.size > 1 else float("nan"))
    out["runs"] = float(len(rows))
    return out


def _with_se(mean: float, se: float, digits: int = 3) -> str:
    """``mean ± se`` (just the mean when the error is unknown)."""
    if np.isnan(se):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {se:.{digits}f}"


def _difference(mine: Dict[str, float], theirs: Dict[str, float], key: str = "f1") -> str:
    """``ours − theirs ± √(se₁² + se₂²)`` of a metric (the runs are independent)."""
    delta = mine[key] - theirs[key]
    se = float(np.hypot(mine[key + "_se"], theirs[key + "_se"]))
    return ("+" if delta >= 0 else "−") + _with_se(abs(delta), se)


# -- the table -----------------------------------------------------------------------------

def _seconds(x: float) -> str:
    return f"{x:.3g} s" if x >= 0.01 else f"{x * 1000:.2g} ms"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="100000", help="comma-separated numbers of users")
    parser.add_argument("--epsilon", default="1,4", help="comma-separated ε")
    parser.add_argument("--s", default="1.1,1.5", help="comma-separated Zipf exponents")
    parser.add_argument("--top", type=int, default=hh.TOP)
    parser.add_argument("--vocabulary", type=int, default=hh.VOCABULARY)
    parser.add_argument("--protocols", default=",".join(PEERS + ("Compressive",)),
                        help="comma-separated protocol names (default: all)")
    parser.add_argument("--cms-k", type=int, default=64,
                        help="pure-LDP's sketch: hash functions (default 64)")
    parser.add_argument("--cms-m", type=int, default=1024,
                        help="pure-LDP's sketch: columns, a power of 2 (default 1024)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3,
                        help="seeded runs of pure-LDP per setting (default 3)")
    parser.add_argument("--our-runs", type=int, default=10,
                        help="seeded runs of ldpdist per setting (default 10)")
    parser.add_argument("--bits", type=int, default=PEER_BITS,
                        help="hashed bits of ldpdist's PEM and TreeHist (default 32, as "
                             "pure-LDP's; 64 = their own default)")
    parser.add_argument("--no-peers", action="store_true", help="ldpdist only")
    parser.add_argument("--out", help="also write the Markdown table to this file")
    args = parser.parse_args(argv)
    ns = [int(x) for x in args.n.split(",")]
    epsilons = [float(x) for x in args.epsilon.split(",")]
    exponents = [float(x) for x in args.s.split(",")]
    wanted = [x.strip() for x in args.protocols.split(",")]
    ours = {entry.name: with_bits(entry, args.bits) for entry in hh.PROTOCOLS}
    for name in wanted:
        if name not in ours:
            print(f"ldpdist has no {name} yet (registry: {', '.join(ours)}): skipped",
                  file=sys.stderr)
    lib = None if args.no_peers else _pure_ldp()
    warnings.filterwarnings("ignore", module="pure_ldp")  # its "small n" warnings

    words = hh.vocabulary(args.vocabulary, hh._rng(args.seed, 0))
    body = []
    for si, s in enumerate(exponents):
        p = hh.zipf(len(words), s)
        for ni, n in enumerate(ns):
            users = hh.draw_users(n, p, hh._rng(args.seed, 0, si, ni, 1))
            counts = np.bincount(users, minlength=len(words))
            for eps in epsilons:
                for pi, name in enumerate(wanted):
                    mine_runs, their_runs = [], []
                    for run in range(max(args.runs, args.our_runs)):
                        seed = hh._seed(hh._rng(args.seed, si, ni, pi, int(eps * 1000), run))
                        if name in ours and run < args.our_runs:
                            mine_runs.append(run_ours(ours[name], eps, args.top, words, users,
                                                      counts, seed))
                        if lib is not None and name in PEERS and run < args.runs:
                            their_runs.append(run_theirs(lib, name, eps, args.top, words,
                                                         users, counts, seed, args.cms_k,
                                                         args.cms_m))
                    mine = _mean(mine_runs) if mine_runs else None
                    theirs = _mean(their_runs) if their_runs else None
                    if mine is None and theirs is None:
                        continue
                    cell = lambda r, key, f: f(r[key]) if r is not None else "—"  # noqa: E731

                    def speed(key: str) -> str:
                        if mine is None or theirs is None:
                            return "—"
                        return f"{theirs[key] / mine[key]:.0f}×"

                    def f1(r: Optional[Dict[str, float]]) -> str:
                        return _with_se(r["f1"], r["f1_se"]) if r is not None else "—"

                    row = [f"Zipf({s:g})", f"{n:,}", f"{eps:g}", name, f1(mine), f1(theirs),
                           _difference(mine, theirs) if mine and theirs else "—",
                           cell(mine, "l1", lambda v: f"{v:.3g}"),
                           cell(theirs, "l1", lambda v: f"{v:.3g}"),
                           cell(mine, "client", _seconds), cell(theirs, "client", _seconds),
                           speed("client"),
                           cell(mine, "server", _seconds), cell(theirs, "server", _seconds),
                           speed("server")]
                    body.append(row)
                    print("  " + " | ".join(row), file=sys.stderr, flush=True)
    header = ["distribution", "n", "ε", "protocol", "F1 ldpdist", "F1 pure-LDP", "ΔF1",
              "ℓ1 ldpdist", "ℓ1 pure-LDP", "clients ldpdist", "clients pure-LDP", "speed-up",
              "server ldpdist", "server pure-LDP", "speed-up"]
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join(["---"] * 4 + ["---:"] * (len(header) - 4)) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    shown = list(argv if argv is not None else sys.argv[1:])
    if "--out" in shown:  # where the table went is not part of how it was made
        at = shown.index("--out")
        del shown[at:at + 2]
    command = " ".join(["python benches/heavy_hitters_peers.py", *shown])
    note = (f"\n\n*`{command}`: "
            f"top {args.top} of {args.vocabulary} random words; F1 of the hashed values found "
            f"against the true top {args.top}: mean ± standard error over {args.our_runs} "
            f"run(s) of ldpdist and {args.runs} of pure-LDP on the same users; ΔF1 = ldpdist − "
            "pure-LDP ± the standard error of the difference; ℓ1 = Σ|f̂ − f| over "
            "the values found (mean); clients = privatize every user; server = aggregate every "
            "report + identify (means); pure-LDP's PEM, TreeHist and SFP "
            f"on the {PEER_BITS}-bit hash of the words with its count-mean-sketch oracle "
            f"(k = {args.cms_k}, m = {args.cms_m}); ldpdist's PEM and TreeHist on the same "
            f"{args.bits}-bit hashed values (`bits={args.bits}`), its other protocols with "
            "their defaults; ldpdist's SFP on the words, told their "
            "alphabet; CMS/HCMS (both libraries) rank the vocabulary as candidates.*\n")
    table = "\n".join(lines) + note
    print(table)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
