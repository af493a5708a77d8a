"""The CSV files of the experiments (columns: :data:`ldpdist.experiments.COLUMNS`)."""

from __future__ import annotations

import csv
from typing import Any, Dict, Iterable, List, Sequence

from .grid import COLUMNS

def write_csv(rows: Iterable[Dict[str, Any]], path: str,
              columns: Sequence[str] = COLUMNS) -> None:
    """Write rows with the given columns (floats as ``repr``, so they read back exactly)."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({key: (repr(value) if isinstance(value, float) else value)
                             for key, value in row.items()})


def read_csv(path: str) -> List[Dict[str, Any]]:
    """Rows of :func:`write_csv`, with numbers converted back (a CSV written before the
    ``sparsity`` or ``support`` column existed reads with an empty one; ``epsilon`` is empty
    for a mechanism without privacy)."""
    out = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            for key in ("k", "n", "run"):
                row[key] = int(row[key])
            row["m"] = int(row["m"]) if row["m"] else ""
            row["sparsity"] = int(row["sparsity"]) if row.get("sparsity") else ""
            row["support"] = int(row["support"]) if row.get("support") else ""
            row["epsilon"] = float(row["epsilon"]) if row["epsilon"] else ""
            for key in ("l1", "l2", "seconds"):
                row[key] = float(row[key])
            out.append(row)
    return out


def read_typed_csv(path: str, integers: Sequence[str], floats: Sequence[str],
                   optional_floats: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Rows of a CSV written by :func:`write_csv` with other columns: ``integers`` and
    ``floats`` converted back, ``optional_floats`` too unless empty (then ``""``)."""
    out = []
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            for key in integers:
                row[key] = int(row[key])
            for key in floats:
                row[key] = float(row[key])
            for key in optional_floats:
                row[key] = float(row[key]) if row[key] else ""
            out.append(row)
    return out
