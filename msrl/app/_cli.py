"""``msrl`` command line: train, eval, record, merge, graph, compare, plan, plot, a thin layer over
``msrl.train``, ``msrl.evaluate``, ``msrl.app.compare`` and the run plan.

Bad input of any kind ends with one line ``msrl: error: ...`` on stderr and
exit status 2, before anything is written.

Each command imports what it runs when it runs (torch, Ray, matplotlib, the algorithms: seconds),
so a mistake in a config is answered before any of them is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import signal
import statistics
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NoReturn

from msrl.core import ConfigError, HeadLostError, MsrlError

if TYPE_CHECKING:
    from msrl.app._config import LoadedConfig

EXIT_BAD_INPUT = 2
VERBOSE_HELP = "show Ray's informational log lines too (its warnings on start, such as token authentication's)"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"msrl: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="msrl", description="Distributed RL with dataflow fragments.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train an algorithm from a YAML config")
    train.add_argument("config", nargs="?", help="YAML config file (optional with --resume)")
    train.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set algo.learning_rate=1e-3 --set policy=local",
    )
    train.add_argument("--resume", metavar="CHECKPOINT", help="continue a run exactly from its checkpoint")
    train.add_argument(
        "--address", help="Ray cluster to join: 'auto' or 'ray://host:port' (default: start a local one)"
    )
    train.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)

    evaluate = commands.add_parser(
        "eval",
        help="greedy evaluation of a checkpoint",
        description="Greedy episodes of a checkpoint's actor on fresh environments. By default the run's own "
        "final evaluation again (its eval.json): as many episodes as its eval_episodes, from its evaluation seed.",
    )
    evaluate.add_argument("checkpoint")
    evaluate.add_argument(
        "--episodes", type=int, help="greedy episodes (default: the run's eval_episodes, or 20 where that is 0)"
    )
    evaluate.add_argument(
        "--seed", type=int, help="seed of the evaluation's environments (default: the run's evaluation seed)"
    )

    record = commands.add_parser(
        "record",
        help="write episodes of a checkpoint's policy as a dataset (Minari's format)",
        description="Episodes of a checkpoint's policy on its environment, written into a new folder in Minari's "
        "format (DIR/data/main_data.hdf5 and metadata.json) for offline algorithms (algo.dataset). The greedy "
        "action, random with probability --epsilon, Gaussian --noise added to Box actions: --epsilon 1 records "
        "random data, a checkpoint partway medium data, the final one expert data.",
    )
    record.add_argument("checkpoint")
    record.add_argument("--episodes", type=int, required=True, help="whole episodes to record")
    record.add_argument("--out", required=True, metavar="DIR", help="the dataset's folder (must not exist)")
    record.add_argument(
        "--epsilon", type=float, default=0.0, help="probability of a uniformly random action (default 0)"
    )
    record.add_argument(
        "--noise", type=float, default=0.0, help="Box actions: Gaussian noise, in half action ranges (default 0)"
    )
    record.add_argument("--seed", type=int, default=0, help="seed of the environments and the noise (default 0)")
    record.add_argument("--envs", type=int, default=8, help="environments stepped together (default 8)")
    record.add_argument("--dataset-id", help="the dataset's id in its metadata (default msrl/<DIR's name>-v0)")

    merge = commands.add_parser(
        "merge",
        help="join datasets of one environment into a new one (D4RL's mixed levels)",
        description="The episodes of every DATASET, in the order given, written into a new folder in Minari's "
        "format: D4RL's medium-expert is `msrl merge medium expert --out medium-expert`. The datasets must hold "
        "the same environment and spaces.",
    )
    merge.add_argument("datasets", nargs="+", metavar="DATASET")
    merge.add_argument("--out", required=True, metavar="DIR", help="the merged dataset's folder (must not exist)")
    merge.add_argument("--dataset-id", help="the dataset's id in its metadata (default msrl/<DIR's name>-v0)")

    graph = commands.add_parser("graph", help="print the traced graph and its fragments, and draw them as DOT and PNG")
    graph.add_argument("config")
    graph.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    graph.add_argument(
        "--out",
        metavar="PREFIX",
        help="write PREFIX.dot and PREFIX.png (default: <runs_dir>/graph-<name>/fdg_<policy name>)",
    )

    compare = commands.add_parser(
        "compare",
        help="run one config under several policies, placements and --set grids; table and plots",
        description="Runs CONFIG once per policy x placement x --set grid point x seed, one run directory each, "
        "and writes a table (printed, CSV, Markdown) and PNG plots to <runs_dir>/compare-<name>/. "
        "Interrupt it at any time: finished runs are kept and the same command continues.",
    )
    compare.add_argument("config")
    compare.add_argument(
        "--policies",
        required=True,
        metavar="A,B,...",
        help="preset names (or custom policy YAML files), comma-separated",
    )
    compare.add_argument(
        "--placements",
        default="",
        metavar="PACK,SPREAD,...",
        help="placement strategies to try for every policy that has one",
    )
    compare.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE[,VALUE...]",
        help="override a config value; several comma-separated values make a sweep axis",
    )
    compare.add_argument("--budget", type=int, metavar="STEPS", help="env steps per run (total_env_steps)")
    compare.add_argument(
        "--seeds", type=int, default=1, metavar="N", help="seeds per combination (config seed, +1, ...)"
    )
    compare.add_argument(
        "--target",
        type=float,
        metavar="RETURN",
        help="return whose time to reach is measured (default: the env's threshold, if known)",
    )
    compare.add_argument("--name", help="comparison name (default: the config's name)")
    compare.add_argument(
        "--address", help="Ray cluster to join: 'auto' or 'ray://host:port' (default: start a local one)"
    )
    compare.add_argument(
        "--predict",
        action="store_true",
        help="put the cost model's prediction (msrl plan's) beside each measured row, with its error",
    )
    compare.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)

    plan = commands.add_parser(
        "plan",
        help="predict every distribution policy for a config on a cluster, and rank them",
        description="Measures a few iterations of the config unsplit (the local policy, in this process), then "
        "predicts each preset at each replica count from the traced graph on this machine, the --address "
        "cluster or a --hosts cluster: iteration time split into compute and communication, env steps/s, "
        "what it needs. Writes <runs_dir>/plan-<name>/plan.json. policy: auto trains under the first row.",
    )
    plan.add_argument("config")
    plan.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    plan.add_argument("--address", help="plan for the Ray cluster there: 'auto' or 'ray://host:port'")
    plan.add_argument("--hosts", type=int, metavar="N", help="plan for N hosts you do not have yet")
    plan.add_argument(
        "--link",
        metavar="RATE/DELAY",
        help="with --hosts: the link between hosts, e.g. 1gbit/0.5ms, 100mbit/2ms, 10gbit (default: none)",
    )
    plan.add_argument("--cpus-per-host", type=float, metavar="C", help="with --hosts (default: this machine's cores)")
    plan.add_argument("--gpus-per-host", type=float, default=0.0, metavar="G", help="with --hosts (default: 0)")
    plan.add_argument(
        "--allow-async",
        action="store_true",
        help="rank async_single_learner too (its actors act with weights an update old: it learns differently)",
    )
    plan.add_argument(
        "--calibration",
        metavar="PLAN_JSON",
        help="reuse the calibration in a plan.json (msrl plan's, or a policy: auto run's) instead of measuring",
    )

    plot = commands.add_parser("plot", help="draw learning curves of finished runs into a PNG")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    plot.add_argument(
        "--x",
        choices=["steps", "time"],
        default="steps",
        help="x axis: env steps or training wall-clock seconds (default: steps)",
    )
    plot.add_argument(
        "--metric", default="episode_return", help="the metrics.jsonl key to draw (default: episode_return)"
    )
    plot.add_argument(
        "--out",
        metavar="PNG",
        help="output file (default: learning_curves.png in the first RUN_DIR, with the metric and x axis in "
        "the name when they are not the defaults)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        commands = {
            "train": _train,
            "eval": _eval,
            "record": _record,
            "merge": _merge,
            "graph": _graph,
            "compare": _compare,
            "plan": _plan,
            "plot": _plot,
        }
        return commands[args.command](args)
    except MsrlError as exc:
        print(f"msrl: error: {' '.join(str(exc).split())}", file=sys.stderr)
        if isinstance(exc, HeadLostError):  # Ray's shutdown at exit would hang on the lost head
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_BAD_INPUT)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:  # Ctrl-C outside a run's loop, or a second stop signal within it
        print(f"msrl: {exc}" if str(exc) else "msrl: interrupted", file=sys.stderr)
        return 128 + getattr(exc, "signum", signal.SIGINT)


def _train(args: argparse.Namespace) -> int:
    if args.resume is None and args.config is not None:
        _check_config(args.config, args.overrides)
    from msrl.app._run import train

    with _ray_logging(args.verbose):
        run = train(args.config, args.overrides, resume=args.resume, address=args.address)
    print(run.summary())
    if run.stopped_by is not None:  # a preemption's notice or Ctrl-C: checkpointed, not finished
        print(run.stop_line(), file=sys.stderr)
        return 128 + signal.Signals[run.stopped_by].value
    if run.evaluation is not None:
        print(run.evaluation)
    return 0


def _eval(args: argparse.Namespace) -> int:
    if args.episodes is not None and args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    from msrl.app._load import evaluate

    print(evaluate(args.checkpoint, args.episodes, seed=args.seed))
    return 0


def _record(args: argparse.Namespace) -> int:
    from msrl.app._record import record

    print(
        record(
            args.checkpoint,
            args.episodes,
            args.out,
            epsilon=args.epsilon,
            noise=args.noise,
            seed=args.seed,
            num_envs=args.envs,
            dataset_id=args.dataset_id,
        )
    )
    return 0


def _merge(args: argparse.Namespace) -> int:
    from msrl.data import merge_datasets, read_episodes

    info = merge_datasets(args.datasets, args.out, dataset_id=args.dataset_id)
    returns = [episode.episode_return for episode in read_episodes(info.path, reader="h5py")]
    spread = statistics.pstdev(returns) if len(returns) > 1 else 0.0
    print(
        f"merged {len(args.datasets)} datasets, {info.total_episodes} episodes ({info.total_steps:,} steps), into "
        f"{info.path}: return {statistics.fmean(returns):.1f} ± {spread:.1f}"
    )
    return 0


def _graph(args: argparse.Namespace) -> int:
    if args.out:
        _check_out_prefix(args.out)
    config = _check_config(args.config, args.overrides)
    import fragments
    from msrl.app._plan import plan

    fdg = plan(config).fdg
    prefix = args.out
    if prefix is None:  # beside the config's runs, not in the current directory (a clone's root)
        directory = os.path.join(config.run.runs_dir, f"graph-{config.run.name}")
        os.makedirs(directory, exist_ok=True)
        prefix = os.path.join(directory, "fdg_" + re.sub(r"[^A-Za-z0-9_.-]", "_", fdg.policy.name))
    print(fdg.graph)
    print(fdg)
    for suffix, write in ((".dot", fragments.write_dot), (".png", fragments.write_png)):
        try:
            write(fdg, prefix + suffix)
        except OSError as exc:
            raise ConfigError(f"cannot write {prefix + suffix}: {exc.strerror or exc}") from exc
    print(f"wrote {prefix}.dot and {prefix}.png")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from msrl.app._compare import compare

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    placements = [p.strip() for p in args.placements.split(",") if p.strip()]
    with _ray_logging(args.verbose):
        result = compare(
            args.config,
            policies,
            placements=placements,
            overrides=args.overrides,
            budget=args.budget,
            seeds=args.seeds,
            address=args.address,
            target=args.target,
            name=args.name,
            predict=args.predict,
        )
    print(f"results in {result.out_dir}: " + ", ".join(os.path.basename(f) for f in result.files.values()))
    return 0


def _plan(args: argparse.Namespace) -> int:
    hypothetical = args.link is not None or args.cpus_per_host is not None or args.gpus_per_host
    if hypothetical and args.hosts is None:
        raise ConfigError("--link, --cpus-per-host and --gpus-per-host describe a --hosts cluster; give --hosts N")
    if args.hosts is not None and args.address is not None:
        raise ConfigError("give --address (a cluster you have) or --hosts (one you do not), not both")
    config = _check_config(args.config, args.overrides)
    from msrl.app import _auto
    from policies import AutoParams

    if args.hosts is not None:  # a bad link or size is answered before anything is measured
        shape = _auto.hypothetical_cluster(args.hosts, args.link or "none", args.cpus_per_host, args.gpus_per_host)
    recorded = _auto.read_calibration(args.calibration) if args.calibration else None
    if args.hosts is None:
        shape = _auto.this_machine() if args.address is None else _auto.cluster_shape(args.address)
    calibration = recorded if recorded is not None else _auto.calibrate_run(config)
    plan = _auto.rank_policies(config, calibration, shape, params=AutoParams(allow_async=args.allow_async))
    print(plan.table())
    directory = os.path.join(config.run.runs_dir, f"plan-{config.run.name}")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "plan.json")
    with open(path, "w", encoding="utf-8") as out:
        json.dump(plan.to_dict(), out, indent=1, sort_keys=True)
    print(f"wrote {path}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from msrl.app._plots import plot_curves
    from msrl.app._run_directory import METRICS_NAME, read_metrics

    groups = {}
    for run_dir in args.run_dirs:
        if not os.path.isfile(os.path.join(run_dir, METRICS_NAME)):
            raise ConfigError(f"{run_dir!r} is not a run directory (no {METRICS_NAME})")
        records = read_metrics(run_dir)
        if records and args.metric not in {key for record in records for key in record}:
            keys = sorted({key for record in records for key in record if not key.startswith("time_")})
            raise ConfigError(f"metric {args.metric!r} is not in {run_dir!r}; valid choices: {', '.join(keys)}")
        label = os.path.basename(os.path.normpath(run_dir))
        while label in groups:
            label += "'"
        groups[label] = [records]
    out = args.out or _default_plot(args.run_dirs[0], args.metric, args.x)
    directory = os.path.dirname(out)
    if not out.endswith(".png") or not os.path.isdir(directory or "."):
        raise ConfigError(f"--out {out!r} must be a .png file in an existing directory")
    print(f"wrote {plot_curves(groups, out, x=args.x, metric=args.metric)}")
    return 0


def _default_plot(run_dir: str, metric: str, x: str) -> str:
    """Where ``msrl plot`` draws without ``--out``: beside the first run's files, named after what
    it draws when that is not the learning curve over env steps."""
    name = "learning_curves"
    if metric != "episode_return":
        name += f"_{re.sub(r'[^A-Za-z0-9_.-]', '_', metric)}"
    if x != "steps":
        name += f"_vs_{x}"
    return os.path.join(run_dir, name + ".png")


@contextlib.contextmanager
def _ray_logging(verbose: bool) -> Iterator[None]:
    """Meanwhile, with --verbose, Ray's own log lines from INFO on; otherwise from ERROR on (the
    default ``cluster.set_ray_log_level``), its informational warnings left out."""
    if not verbose:  # cluster (torch, Ray) stays unimported until the command needs it
        yield
        return
    import cluster

    before = cluster.set_ray_log_level(logging.INFO)
    try:
        yield
    finally:
        cluster.set_ray_log_level(before)


def _check_config(path: str, overrides: Sequence[str]) -> LoadedConfig:
    """The checked config: a mistake in it is answered here, before torch, Ray or the algorithm's
    code is imported by what runs it (the run reads the same file again, in milliseconds)."""
    from msrl.app._config import load_config

    return load_config(path, overrides)


def _check_out_prefix(prefix: str) -> None:
    """Fail before tracing, and before anything is printed, on an --out that cannot be written."""
    directory, name = os.path.split(prefix)
    if not name:
        raise ConfigError(
            f"--out {prefix!r} names a directory; give a file prefix such as {os.path.join(prefix, 'fdg')!r}"
        )
    if not os.path.isdir(directory or "."):
        raise ConfigError(f"--out {prefix!r}: output directory {directory!r} does not exist")
