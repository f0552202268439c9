"""Table of the algorithm x preset matrix: greedy return mean +- std over seeds per cell.

MSRL_MATRIX_OUT=/tmp/matrix.jsonl python -m pytest -m slow tests/e2e/test_algorithm_matrix.py
python benchmarks/algorithm_matrix.py /tmp/matrix.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def main(path: str) -> None:
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    with open(path, encoding="utf-8") as results:
        for line in results:
            row = json.loads(line)
            cells[(row["config"], row["preset"])].append(row)
    presets = sorted({preset for _, preset in cells})
    print("| config | " + " | ".join(presets) + " |")
    print("|---|" + "---|" * len(presets))
    for config in sorted({config for config, _ in cells}):
        row = []
        for preset in presets:
            runs = cells.get((config, preset), [])
            returns = [r["return"] for r in runs]
            if not returns:
                row.append("not run")
                continue
            spread = statistics.stdev(returns) if len(returns) > 1 else 0.0
            lag = statistics.fmean(r["policy_lag"] for r in runs)
            row.append(
                f"{statistics.fmean(returns):.0f} ± {spread:.0f} (n={len(returns)}"
                + (f", lag {lag:.2f}" if lag else "")
                + ")"
            )
        print(f"| {config} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/algorithm_matrix.py RESULTS.jsonl")
    main(sys.argv[1])
