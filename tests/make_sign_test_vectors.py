"""Regenerate tests/data/sign_test_vectors.json from the pure-Python reference.

    python tests/make_sign_test_vectors.py          # rewrite the file
    python tests/make_sign_test_vectors.py --check  # exit 1 if the file differs

The vectors come from ``chacha_reference`` (an independent implementation of the
specification in rust/signs.rs), never from ldpdist itself, so they pin the generator: a change
to the library's streams makes test_signs.py fail instead of silently changing every matrix.
"""

from __future__ import annotations

import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import chacha_reference as ref  # noqa: E402

PATH = HERE / "data" / "sign_test_vectors.json"

SEEDS = [0, 1, 20240607, 2**255 - 19, 2**256 - 1]  # the last two are > 2**200
MS = [1, 63, 64, 65, 500]
JS = [0, 1, 12345, 2**40]
CONFIGS = [
    ("rademacher", 0.5),
    ("bernoulli", 0.5),
    ("bernoulli", 0.3),
    ("bernoulli", 0.9),
    ("balanced", 0.5),
    ("balanced", 0.25),
    ("balanced", 0.9),
]


def records():
    out = []
    for kind, p in CONFIGS:
        for seed in SEEDS:
            for m in MS:
                for j in JS:
                    signs = ref.column(seed, m, j, kind, p)
                    out.append({
                        "seed": seed,  # exact in Python's json (arbitrary-precision integers)
                        "m": m,
                        "j": j,
                        "kind": kind,
                        "p": p,
                        "first_64_signs": signs[:64],
                    })
    return out


def render() -> str:
    doc = {
        "description": (
            "Sign-matrix test vectors from tests/chacha_reference.py (see rust/signs.rs). "
            "seeds are exact integers up to 2**256 - 1 (parse them as big integers); first_64_signs is the column's first min(m, 64) entries."
        ),
        "records": records(),
    }
    # One record per line keeps diffs readable.
    lines = ",\n".join("    " + json.dumps(r, separators=(", ", ": ")) for r in doc["records"])
    return (
        "{\n"
        f'  "description": {json.dumps(doc["description"])},\n'
        '  "records": [\n'
        f"{lines}\n"
        "  ]\n"
        "}\n"
    )


def main(argv) -> int:
    text = render()
    if "--check" in argv:
        same = PATH.exists() and PATH.read_text() == text
        print("up to date" if same else f"{PATH} differs from the reference")
        return 0 if same else 1
    PATH.parent.mkdir(parents=True, exist_ok=True)
    PATH.write_text(text)
    print(f"wrote {len(json.loads(text)['records'])} records to {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
