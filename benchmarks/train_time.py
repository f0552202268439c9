"""Train one config with ``msrl.train`` and print its training time per env step, for interleaved
A/B runs (``interleaved_ab.py``) of whole training runs rather than of one phase.

The figure is the run's own training clock (``Run.wall_time``: every iteration with its metrics
record, TensorBoard event and checkpoints; start-up and the final evaluation excluded), to the
tenth of a millisecond, where the CLI prints tenths of a second.  The first iteration builds or
loads the compiled steps (``algo.compile: true``): run once beforehand, so that they load from the
cache in milliseconds.

    python benchmarks/train_time.py configs/a2c_cartpole.yaml --set total_env_steps=40000 --set algo.compile=true

prints ``train_s 4.1234 env_steps 40000 us_per_env_step 103.08 greedy_return 500.0`` (the
greedy return with ``--set eval_episodes=N``; none by default).
"""

from __future__ import annotations

import argparse
import io
import tempfile
import warnings

import msrl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="a YAML config")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="an override, as msrl train takes"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # torch's deprecation notes would interleave with the figure
    with tempfile.TemporaryDirectory() as runs:
        overrides = ["progress=false", "eval_episodes=0", f"runs_dir={runs}", *args.set]
        run = msrl.train(args.config, overrides, stream=io.StringIO())
    greedy = f" greedy_return {run.evaluation.mean:.1f}" if run.evaluation is not None else ""
    per_step = run.wall_time / max(1, run.env_steps) * 1e6
    print(f"train_s {run.wall_time:.4f} env_steps {run.env_steps} us_per_env_step {per_step:.2f}{greedy}")


if __name__ == "__main__":
    main()
