"""``msrl`` command line: train, eval, graph.

Bad input of any kind ends with one line ``msrl: error: ...`` on stderr and
exit status 2, before anything is written.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import NoReturn, Sequence

from msrl._errors import MsrlError

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

    graph = commands.add_parser("graph", help="print the traced graph and its fragments")
    graph.add_argument("config")
    graph.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
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
    from msrl._run import train

    result = train(args.config, args.overrides, resume=args.resume, address=args.address)
    print(f"trained {result.iterations} iterations, {result.env_steps:,} env steps in {result.wall_time:.1f} s; "
          f"results in {result.run_dir}")
    if result.eval_returns:
        print(_eval_line(result.eval_returns))
    return 0


def _eval(args: argparse.Namespace) -> int:
    from msrl._checkpoint import load_checkpoint
    from msrl._config import load_config
    from msrl._evaluate import evaluate
    from msrl._run import build

    if args.episodes < 1:
        raise MsrlError(f"--episodes must be >= 1, got {args.episodes}")
    checkpoint = load_checkpoint(args.checkpoint)
    config = load_config(None, base=checkpoint["config"])
    algorithm = build(config)
    for name, component in algorithm.components().items():
        component.load_state_dict(checkpoint["components"].get(name, {}))
    print(_eval_line(evaluate(algorithm, args.episodes, seed=args.seed)))
    return 0


def _graph(args: argparse.Namespace) -> int:
    from msrl._config import load_config
    from msrl._run import plan

    _, fdg = plan(load_config(args.config, args.overrides))
    print(fdg.graph)
    print(fdg)
    return 0


def _eval_line(returns: list[float]) -> str:
    spread = statistics.pstdev(returns) if len(returns) > 1 else 0.0
    return f"greedy evaluation return: {statistics.fmean(returns):.1f} ± {spread:.1f} over {len(returns)} episodes"
