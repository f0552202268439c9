"""``msrl`` command line: train, eval, graph, a thin layer over ``msrl.train``,
``msrl.evaluate`` and the run plan.

Bad input of any kind ends with one line ``msrl: error: ...`` on stderr and
exit status 2, before anything is written.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import NoReturn, Sequence

import fragments
from msrl.app._config import load_config
from msrl.app._load import evaluate
from msrl.app._plan import plan
from msrl.app._run import train
from msrl.core import ConfigError, MsrlError

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"msrl: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="msrl", description="Distributed RL with dataflow fragments.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train an algorithm from a YAML config")
    train.add_argument("config", nargs="?", help="YAML config file (optional with --resume)")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config value, e.g. --set algo.learning_rate=1e-3 --set policy=local")
    train.add_argument("--resume", metavar="CHECKPOINT", help="continue a run exactly from its checkpoint")
    train.add_argument("--address", help="Ray cluster to join: 'auto' or 'ray://host:port' (default: start a local one)")

    evaluate = commands.add_parser("eval", help="greedy evaluation of a checkpoint")
    evaluate.add_argument("checkpoint")
    evaluate.add_argument("--episodes", type=int, default=20)
    evaluate.add_argument("--seed", type=int, default=12345)

    graph = commands.add_parser("graph", help="print the traced graph and its fragments, and draw them as DOT and PNG")
    graph.add_argument("config")
    graph.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    graph.add_argument("--out", metavar="PREFIX",
                       help="write PREFIX.dot and PREFIX.png (default: fdg_<policy name> in the current directory)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"train": _train, "eval": _eval, "graph": _graph}[args.command](args)
    except MsrlError as exc:
        print(f"msrl: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("msrl: interrupted", file=sys.stderr)
        return 130


def _train(args: argparse.Namespace) -> int:
    run = train(args.config, args.overrides, resume=args.resume, address=args.address)
    print(f"trained {run.iterations} iterations, {run.env_steps:,} env steps in {run.wall_time:.1f} s; "
          f"results in {run.run_dir}")
    if run.evaluation is not None:
        print(run.evaluation)
    return 0


def _eval(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    print(evaluate(args.checkpoint, args.episodes, seed=args.seed))
    return 0


def _graph(args: argparse.Namespace) -> int:
    if args.out:
        _check_out_prefix(args.out)
    fdg = plan(load_config(args.config, args.overrides)).fdg
    prefix = args.out or "fdg_" + re.sub(r"[^A-Za-z0-9_.-]", "_", fdg.policy.name)
    print(fdg.graph)
    print(fdg)
    for suffix, write in ((".dot", fragments.write_dot), (".png", fragments.write_png)):
        try:
            write(fdg, prefix + suffix)
        except OSError as exc:
            raise ConfigError(f"cannot write {prefix + suffix}: {exc.strerror or exc}") from exc
    print(f"wrote {prefix}.dot and {prefix}.png")
    return 0


def _check_out_prefix(prefix: str) -> None:
    """Fail before tracing, and before anything is printed, on an --out that cannot be written."""
    directory, name = os.path.split(prefix)
    if not name:
        raise ConfigError(f"--out {prefix!r} names a directory; give a file prefix such as {os.path.join(prefix, 'fdg')!r}")
    if not os.path.isdir(directory or "."):
        raise ConfigError(f"--out {prefix!r}: output directory {directory!r} does not exist")
