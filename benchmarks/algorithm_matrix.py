"""Does every algorithm learn under every preset?  The table of the algorithm x preset matrix that
the slow test records: greedy return mean +- std over seeds per cell.

    MSRL_MATRIX_OUT=/tmp/matrix.jsonl python -m pytest -m slow tests/e2e/test_algorithm_matrix.py
    python -m benchmarks.algorithm_matrix /tmp/matrix.jsonl [more.jsonl ...]
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from benchmarks.harness import read_jsonl, table_head, table_row


def main(paths: list[str]) -> None:
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in read_jsonl(paths):
        cells[(row["config"], row["preset"])].append(row)
    presets = sorted({preset for _, preset in cells})
    print(table_head(["config", *presets], "l" * (len(presets) + 1)))
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
        print(table_row([config, *row]))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m benchmarks.algorithm_matrix RESULTS.jsonl [MORE.jsonl ...]")
    main(sys.argv[1:])
