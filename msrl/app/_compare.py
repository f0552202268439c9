"""``msrl compare``: one config under several distribution policies, placements and ``--set``
grids (sweeps), seeds each, run one after another on the same Ray (embedded by default), each
run in its own directory; then a table (printed, CSV, Markdown) and plots of the lot.

Layout of ``<runs_dir>/compare-<name>/``::

    runs/<combination>_seed<k>/   one ordinary run directory per run (metrics, TensorBoard, checkpoint)
    results.jsonl                 one row per finished run, appended as each run ends (its
                                  ``run_dir`` relative to the comparison's directory)
    summary.csv, summary.md       the table, one row per combination (seeds aggregated)
    summary_fragments.csv         the time split of each fragment, for policies with several
    return_vs_time.png, return_vs_steps.png, time_split.png

A run counts as done once its row is in ``results.jsonl``.  Interrupting a compare keeps the
finished runs and their rows; running the same command again skips them and continues an
unfinished run from its last checkpoint (or starts it again when it had none).

Sweeps are grids written ``--set key=a,b,c`` here rather than Ray Tune trials: the runs of a
comparison are timed, so they run one at a time on the same machine (Tune would run trials
side by side and each trial's Ray actors would compete for the cores), and every run stays an
ordinary msrl run directory that ``msrl eval``, ``msrl plot`` and TensorBoard read.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from msrl.app._config import apply_run_overrides, load_config, validate_run
from msrl.app._grid import Combination, combinations, policy_entry, split_sweeps
from msrl.app._run_directory import CHECKPOINT_NAME
from msrl.core import ConfigError, MsrlError, apply_overrides, read_yaml

if TYPE_CHECKING:
    from msrl.app._run import Run

T = TypeVar("T")
RESULTS_NAME = "results.jsonl"
OWN_TARGETS = {"Pendulum-v1": -250.0}
"""Default ``--target`` for environments that state no ``reward_threshold`` (gymnasium has none for
Pendulum): the learning tests' threshold.  Every other env's default is its spec's threshold."""


def default_target(env_id: str) -> float | None:
    """The return ``compare`` times runs to when no ``--target`` is given: the env's
    ``EnvSpec.reward_threshold`` (gymnasium's, for a gymnasium id), else ``OWN_TARGETS``, else None."""
    import msrl.envs

    try:
        threshold = msrl.envs.spec(env_id).reward_threshold
    except MsrlError:  # an id the run itself refuses; the run's own error says why
        return None
    return threshold if threshold is not None else OWN_TARGETS.get(env_id)


@dataclass
class Comparison:
    """What ``compare`` returns: where everything is, the per-run rows and the table."""

    out_dir: str
    rows: list[dict[str, Any]]
    table: list[dict[str, Any]]
    files: dict[str, str] = field(default_factory=dict)


def compare(
    config: str | os.PathLike,
    policies: Sequence[str],
    *,
    placements: Sequence[str] = (),
    overrides: Sequence[str] = (),
    budget: int | None = None,
    seeds: int = 1,
    address: str | None = None,
    target: float | None = None,
    name: str | None = None,
    stream: TextIO | None = None,
    table_stream: TextIO | None = None,
    predict: bool = False,
) -> Comparison:
    """Run ``config`` under every combination not already done, then write the table and plots.
    Progress goes to ``stream`` (stderr), the table to ``table_stream`` (stdout).  With ``predict``
    the cost model's prediction for each combination (``msrl plan``'s, from one calibration of each
    grid point on this machine) stands beside its measurement in the table.

    Example::

        result = compare("configs/ppo_cartpole.yaml", ["local", "multi_learner"], budget=20_000)
        print(result.out_dir, result.table[0]["env_steps_per_s"])
    """
    stream = sys.stderr if stream is None else stream
    table_stream = sys.stdout if table_stream is None else table_stream
    if not policies:
        raise ConfigError("--policies needs at least one policy")
    if seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {seeds}")
    if target is not None and not math.isfinite(target):
        raise ConfigError(f"--target must be a finite return, got {target}")
    if budget is not None and budget < 1:
        raise ConfigError(f"--budget must be >= 1 env step, got {budget}")
    from policies import PLACEMENTS

    for placement in placements:
        if placement not in PLACEMENTS:
            raise ConfigError(f"unknown placement {placement!r}; valid choices: {', '.join(PLACEMENTS)}")
    policies, placements = list(dict.fromkeys(policies)), list(dict.fromkeys(placements))  # each once
    fixed, grid = split_sweeps(overrides)
    base = apply_run_overrides(read_yaml(os.fspath(config)), fixed)
    if budget is not None:
        base["total_env_steps"] = int(budget)
    settings, _ = validate_run(base)
    name = name or settings.name
    if not name or "/" in name or name.startswith("."):
        raise ConfigError(f"--name must be a plain directory name, got {name!r}")
    out = Path(settings.runs_dir) / f"compare-{name}"
    combos = combinations(policies, placements, grid, [settings.seed + k for k in range(seeds)])
    raws = {combo: _raw_config(base, combo, out) for combo in combos}
    # Every combination is checked before anything runs or is written: what can be without the
    # algorithm's code (torch: seconds) first, then its whole config, then that it traces, cuts and builds.
    for combo, raw in raws.items():
        _checked(combo, validate_run, raw)
    first = load_config(None, [], base=base)
    configs = {combo: _checked(combo, load_config, None, [], base=raw) for combo, raw in raws.items()}
    import cluster
    from msrl.app._plan import plan
    from msrl.app._summary import run_row, write_summary

    fdgs = {combo: _checked(combo, plan, loaded).fdg for combo, loaded in configs.items()}
    env_id = getattr(first.algo, "env_id", None)
    if target is None:  # the env's own, when known
        target = default_target(env_id) if isinstance(env_id, str) else None
    else:
        target = float(target)

    predicted = _predictions(configs, fdgs, address, stream) if predict else {}

    (out / "runs").mkdir(parents=True, exist_ok=True)
    rows = _read_rows(out / RESULTS_NAME)
    done = {row["key"] for row in rows}
    print(
        f"msrl compare: {len(combos)} runs in {out} ({len(done & {c.key for c in combos})} already done)", file=stream
    )
    try:
        for index, combo in enumerate(combos, 1):
            if combo.key in done:
                print(f"msrl compare: [{index}/{len(combos)}] {combo.key}: done already, skipped", file=stream)
                continue
            print(f"msrl compare: [{index}/{len(combos)}] {combo.key}", file=stream)
            baseline = cluster.resources_in_use()
            run = _run(raws[combo], out / "runs" / combo.slug, address, stream)
            cluster.wait_until_released(baseline)  # the next run starts on the cluster this one found
            row = run_row(combo, run, target, configs[combo].policy)
            row["run_dir"] = os.path.relpath(run.run_dir, out)  # the comparison can move as a whole
            _append_row(out / RESULTS_NAME, row)
            rows.append(row)
            done.add(combo.key)
    finally:  # interrupted or not, the table shows every finished run: what results.jsonl holds
        wanted = {c.key for c in combos}  # (an interrupt may land between writing a row and keeping it here)
        mine = [r for r in _read_rows(out / RESULTS_NAME) if r["key"] in wanted]
        table, files = write_summary(out, combos, mine, target, first.run.name, stream, table_stream, predicted)
    return Comparison(str(out), mine, table, files)


def _predictions(
    configs: dict[Combination, Any], fdgs: dict[Combination, Any], address: str | None, stream: TextIO
) -> dict[str, dict[str, Any]]:
    """Combination label -> the cost model's prediction for it (``fdgs``: each combination's
    fragmented graph, as the checks before the runs cut it) on the cluster the runs will use,
    calibrated once per grid point (the policy does not change what is calibrated)."""
    import fragments
    from msrl.app import _auto

    shape = _auto.this_machine() if address is None else _auto.cluster_shape(address)
    calibrations: dict[tuple, fragments.Calibration] = {}
    out: dict[str, dict[str, Any]] = {}
    for combo, loaded in configs.items():
        if combo.label in out:
            continue
        if combo.sweep not in calibrations:
            print(f"msrl compare: calibrating {dict(combo.sweep) or loaded.run.name} for --predict", file=stream)
            calibrations[combo.sweep] = _auto.calibrate_run(loaded)
        p = fragments.predict(fdgs[combo], calibrations[combo.sweep], shape, fragments.CostConstants())
        out[combo.label] = {
            "predicted_env_steps_per_s": p.env_steps_per_s,
            "predicted_seconds_per_iteration": p.iteration_s,
            "predicted_compute_s": p.compute_s,
            "predicted_communication_s": p.communication_s,
            "predicted_dominant": p.dominant if p.feasible else f"cannot run: {p.reason}",
        }
    return out


def _checked(combo: Combination, check: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``check(*args, **kwargs)``, its ``ConfigError`` prefixed with the combination it is about."""
    try:
        return check(*args, **kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{combo.label}: {exc}") from None


def _raw_config(base: dict[str, Any], combo: Combination, out: Path) -> dict[str, Any]:
    raw = apply_overrides(base, [f"{key}={value}" for key, value in combo.sweep])
    raw.update(
        policy=policy_entry(combo, raw.get("policy")),
        seed=combo.seed,
        runs_dir=str(out / "runs"),
        name=combo.slug,
        progress=False,
    )
    return raw


def _run(raw: dict[str, Any], run_dir: Path, address: str | None, stream: TextIO) -> Run:
    """Train one combination; an unfinished earlier attempt continues from its checkpoint."""
    from msrl.app._run import train

    if run_dir.exists():
        checkpoint = run_dir / CHECKPOINT_NAME
        if checkpoint.exists():
            print(f"msrl compare: continuing the unfinished run in {run_dir} from its checkpoint", file=stream)
            return train(None, [], resume=checkpoint, address=address, stream=stream)
        print(f"msrl compare: {run_dir} was interrupted before its first checkpoint; starting it again", file=stream)
        shutil.rmtree(run_dir)
    return train(raw, [], address=address, stream=stream)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of earlier runs; a line cut short by an interruption is dropped (its run reruns)."""
    if not path.exists():
        return []
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _append_row(path: Path, row: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


__all__ = ["Combination", "Comparison", "RESULTS_NAME", "combinations", "compare", "split_sweeps"]
