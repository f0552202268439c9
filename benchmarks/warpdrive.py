"""WarpDrive (salesforce/warp-drive 2.7.1, numba backend) measured on the GPU that msrl's GPU rows run on: the
peer of three questions (GPU training, environment stepping and Tag scaling against WarpDrive).

WarpDrive's side only; msrl's rows come from ``benchmarks.tag_scaling --backends cuda,torch --device cuda``,
``benchmarks.env_stepping --rows cuda`` and ``benchmarks.training_speed --device cuda`` on the same machine.  Env
steps, not agent steps, as ``benchmarks.tag_scaling`` counts them.

1. Tag: WarpDrive's ``TagContinuous`` stepped by its ``EnvWrapper`` (numba kernels, one block per environment and
   one thread per agent: at most 1,024 agents), uniformly random actions drawn on the device before timing and
   copied into WarpDrive's action array each step; env steps/s = batch steps x envs (agent steps/s: x agents).
   A fifth of the agents are taggers (``TAG_CONFIG`` for the rest).  ``num_observed`` 8: the 8 nearest; 0: all
   others (up to 100 agents, as benchmarks.tag_scaling).  Finished episodes restart inside the timed steps as
   WarpDrive's trainer restarts them: the done flags are read, and when any is set, ``reset_only_done_envs()``.
2. CartPole: WarpDrive's CUDA CartPole (its run config's 500-step episodes, 1,000-state reset pool), random actions.
3. PPO: WarpDrive's trainer (``TrainerA2C`` with ``algorithm: PPO``: one gradient step on the whole batch per
   iteration, 1 epoch x 1 minibatch) on its ``single_cartpole.yaml`` (fc [32, 32], lr 1e-3, ...) with
   ``--ppo-steps`` steps per env per iteration (msrl's 32; WarpDrive ships 500 at 100 envs): training env steps/s
   by WarpDrive's own clock (``perf_stats``), after one warm-up iteration that pays for compilation.

Cells run in turn (cheap sections first) in a worker process; one that raises, or is silent for ``--cell-timeout``
seconds, gets a one-line reason and a fresh worker takes the next.  Rows print as cells end, so a run cut short
keeps them; ``--budget`` starts no cell late.  On the GPU machine (no pycuda: WarpDrive's numba backend runs on
numba-cuda), WarpDrive's and gym 0.26's wheels in .whl/wd, as tools/gpu/check.sh's ``warpdrive`` phase does:

    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site-wd .whl/wd/*.whl
    PYTHONPATH=/tmp/site-wd python3 -m benchmarks.warpdrive --budget 150 --out $OUT/warpdrive.json   # or --quick
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import queue
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

from benchmarks.harness import REPO, rate, versions

SIZES = ("1x10", "100x10", "2000x10", "100x100", "2000x100", "100x1000", "2000x1000")
"""Envs x agents of the Tag rows: some of benchmarks.tag_scaling's grid (1 ... 2,000 x 10 ... 1,000), its far
corner too."""
ALL_OTHERS_UP_TO = 100
"""Agents up to which the all-others observation (num_observed 0) is measured too, as in benchmarks.tag_scaling."""
TAG_CONFIG = {"grid_length": 10.0, "episode_length": 100, "tagging_distance": 0.1, "seed": 0}
"""WarpDrive's Tag set as msrl's is (world 10, 100 steps, tagging distance 1 = 0.1 x grid); its defaults otherwise."""
CARTPOLE_ENVS = (4096, 65536, 1048576)
PPO_ENVS = (8192, 65536)
ACTION_SETS = 50
"""Random action sets drawn before timing and cycled, as benchmarks.tag_scaling does."""
MARK = "@@warpdrive "


def apply_shims() -> None:
    """What WarpDrive 2.7.1 and gym 0.26 need on NumPy 2 and Python 3.12, set before either is imported.
    ``np.row_stack``: NumPy 2.5 removed this alias of ``np.vstack``, yet numba-cuda (under WarpDrive's numba
    backend) overloads it on any NumPy 2.  ``np.bool8``: gone since NumPy 2, named by gym 0.26's env checker.
    No bytecode: WarpDrive rewrites ``warp_drive/numba_includes/env_runner.py`` for each env and imports it; no
    ``.pyc`` of the last one may stand in.  (An int seed: WarpDrive's trainer defaults its seed to ``np.int32``,
    which ``random.seed`` refuses on Python 3.11+; ``measure_ppo`` sets ``seed: 0`` in the run config.)"""
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")  # one block per env is WarpDrive's design
    sys.dont_write_bytecode = True
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    if not hasattr(np, "bool8"):
        np.bool8 = np.bool_


def machine() -> dict[str, Any]:
    import torch

    found: dict[str, Any] = {"python": platform.python_version(), "cuda": torch.version.cuda}
    found.update(versions(("rl-warp-drive", "torch", "numpy", "numba", "numba-cuda", "gym")))
    found["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    return found


# -- one cell ---------------------------------------------------------------------------------------
def fresh_wrapper(env: Any, num_envs: int) -> Any:
    """WarpDrive's ``EnvWrapper``, numba backend.  WarpDrive writes ``env``'s kernel module and imports it by one
    fixed name: the last cell's is dropped first (CartPole after Tag), the shared core kernels stay compiled."""
    from warp_drive.env_wrapper import EnvWrapper

    for name in ("warp_drive.numba_includes.env_runner", "warp_drive.numba_includes.env_config"):
        sys.modules.pop(name, None)
    return EnvWrapper(env_obj=env, num_envs=num_envs, env_backend="numba")


def push_step_arrays(wrapper: Any, first_obs: dict) -> tuple[Any, list[int]]:
    """The observation, action and reward arrays of a step, pushed as WarpDrive's trainer pushes them but from
    the one host reset already done (its ``create_and_push_data_placeholders`` resets the Python env once per
    env: hours at 2,000 x 1,000).  Returns the action tensor and each action component's number of choices."""
    import numpy as np
    from warp_drive.utils.constants import Constants
    from warp_drive.utils.data_feed import DataFeed

    n, agents = wrapper.n_envs, sorted(first_obs)
    obs = np.stack([np.asarray(first_obs[a], dtype=np.float32) for a in agents])
    space = wrapper.env.action_space[agents[0]]
    choices = [int(k) for k in space.nvec] if hasattr(space, "nvec") else [int(space.n)]
    feed = DataFeed()
    every_env = np.ascontiguousarray(np.broadcast_to(obs, (n, *obs.shape)))
    feed.add_data(name=Constants.OBSERVATIONS, data=every_env, save_copy_and_apply_at_reset=True)
    feed.add_data(name=Constants.ACTIONS, data=np.zeros((n, len(agents), len(choices)), dtype=np.int32))
    feed.add_data(name=Constants.REWARDS, data=np.zeros((n, len(agents)), dtype=np.float32))
    wrapper.cuda_data_manager.push_data_to_device(feed, torch_accessible=True)
    return wrapper.cuda_data_manager.data_on_device_via_torch(Constants.ACTIONS), choices


def measure_env(wrapper: Any, seconds: float) -> float:
    """Env steps/s of a wrapped environment under random actions, finished episodes restarted in the timed
    steps as WarpDrive's trainer restarts them."""
    import torch

    first_obs = wrapper.reset_all_envs()  # the first reset runs on the host and pushes the env's arrays
    actions, choices = push_step_arrays(wrapper, first_obs)
    if wrapper.cuda_data_manager.reset_target_to_pool:
        wrapper.init_reset_pool(0)
    generator, device = torch.Generator(device=actions.device).manual_seed(0), actions.device
    drawn = [
        torch.stack([torch.randint(0, k, actions.shape[:2], generator=generator, device=device) for k in choices], -1)
        for _ in range(ACTION_SETS)
    ]
    done = wrapper.cuda_data_manager.data_on_device_via_torch("_done_")

    def step(action: Any) -> None:
        actions.copy_(action)  # int64 -> WarpDrive's int32, on the device
        wrapper.step_all_envs()
        if done.any():
            wrapper.reset_only_done_envs()

    wrapper.reset_only_done_envs()  # compiles the reset kernels before the clock starts
    step(drawn[0])
    return rate(step, drawn, wrapper.n_envs, seconds, torch.cuda.synchronize)


def measure_tag(envs: int, agents: int, observed: int, seconds: float) -> dict[str, Any]:
    from example_envs.tag_continuous.tag_continuous import TagContinuous

    if agents > 1024:  # CUDA's most threads per block
        raise ValueError(f"{agents} agents: WarpDrive's numba Tag runs one thread per agent in one block per env")
    taggers, nearest = max(1, agents // 5), min(observed, agents - 1) if observed else 2
    observe = {"use_full_observation": observed == 0, "num_other_agents_observed": nearest}
    env = TagContinuous(num_taggers=taggers, num_runners=agents - taggers, **observe, **TAG_CONFIG)
    per_s = measure_env(fresh_wrapper(env, envs), seconds)
    return {"env_steps_per_s": per_s, "agent_steps_per_s": per_s * agents}


def measure_cartpole(envs: int, seconds: float) -> dict[str, Any]:
    from example_envs.single_agent.classic_control.cartpole.cartpole import CUDAClassicControlCartPoleEnv

    env = CUDAClassicControlCartPoleEnv(episode_length=500, reset_pool_size=1000, seed=0)
    return {"env_steps_per_s": measure_env(fresh_wrapper(env, envs), seconds)}


def measure_ppo(envs: int, steps: int, iterations: int) -> dict[str, Any]:
    """WarpDrive's trainer as its example_training_script_numba.py builds it, single_cartpole.yaml with PPO."""
    import yaml
    from example_envs.single_agent.classic_control.cartpole.cartpole import CUDAClassicControlCartPoleEnv
    from warp_drive.training.trainers.trainer_a2c import TrainerA2C
    from warp_drive.utils.common import get_project_root

    path = get_project_root() / "warp_drive" / "training" / "run_configs" / "single_cartpole.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf8"))
    batch = envs * steps
    config["trainer"].update(num_envs=envs, train_batch_size=batch, num_episodes=batch, seed=0)
    config["policy"]["shared"]["algorithm"] = "PPO"
    with tempfile.TemporaryDirectory(prefix="warpdrive-") as saving:
        config["saving"].update(basedir=saving, metrics_log_freq=10**9, model_params_save_freq=10**9)
        wrapper = fresh_wrapper(CUDAClassicControlCartPoleEnv(**config["env"]), envs)
        agent_ids = {"shared": list(wrapper.env.agents)}
        trainer = TrainerA2C(wrapper, config, agent_ids, results_dir="bench", verbose=False)
        trainer.num_iters = 1
        trainer.train()  # warm-up: numba compiles, cuBLAS plans
        stats = trainer.perf_stats  # accumulates over both calls of train()
        warm_total, warm_env = stats.total_time, stats.env_step_time
        trainer.num_iters = iterations
        trainer.train()
        total, env_time = stats.total_time - warm_total, stats.env_step_time - warm_env
        trainer.graceful_close()
    return {"env_steps_per_s": iterations * batch / total, "env_share": env_time / total, "batch": batch}


def release_memory() -> None:
    """Hand the cell's GPU memory back before the next cell (2,000 x 1,000 Tag holds about 35 GB)."""
    import numba.cuda
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        numba.cuda.current_context().deallocations.clear()


def parse_cell(cell: str) -> dict[str, Any]:
    """``tag:ENVSxAGENTS:OBSERVED``, ``cartpole:ENVS`` or ``ppo:ENVS`` -> the fields that name it."""
    kind, size, *rest = cell.split(":")
    if kind == "tag":
        envs, agents = (int(v) for v in size.split("x"))
        return {"cell": cell, "table": kind, "envs": envs, "agents": agents, "num_observed": int(rest[0])}
    return {"cell": cell, "table": kind, "envs": int(size)}


def run_cell(cell: str, args: argparse.Namespace) -> dict[str, Any]:
    """One cell's record; an exception becomes its ``error`` (one line), its traceback goes to stderr."""
    record: dict[str, Any] = {**parse_cell(cell), "error": None}
    start = time.perf_counter()
    try:
        if record["table"] == "tag":
            record.update(measure_tag(record["envs"], record["agents"], record["num_observed"], args.seconds))
        elif record["table"] == "cartpole":
            record.update(measure_cartpole(record["envs"], args.seconds))
        else:
            record["steps_per_env"] = args.ppo_steps
            record.update(measure_ppo(record["envs"], args.ppo_steps, args.train_iters))
        release_memory()
    except Exception as error:
        traceback.print_exc(limit=8)
        where = traceback.extract_tb(error.__traceback__)[-1]
        said = " ".join(str(error).split()) or f"at {where.filename}:{where.lineno}"
        record["error"] = f"{type(error).__name__}: {said}"[:240]
    record["wall_s"] = time.perf_counter() - start
    return record


# -- workers and report -----------------------------------------------------------------------------
def worker(cells: list[str], args: argparse.Namespace) -> int:
    """Run ``cells``, marked lines on stdout; stop after a failure, whose CUDA context may be unusable."""
    print(MARK + json.dumps({"meta": machine()}), flush=True)
    for cell in cells:
        print(MARK + json.dumps({"start": cell}), flush=True)
        late = args.until and time.time() > args.until
        record = {**parse_cell(cell), "error": "not run: --budget spent"} if late else run_cell(cell, args)
        print(MARK + json.dumps({"result": record}), flush=True)
        if record["error"] and not late:
            return 3
    return 0


def pump(stream: Any, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_workers(cells: list[str], report: Report) -> None:
    """Every cell's record, from as many workers as failures need; a worker's other output goes to stderr."""
    args, pending = report.args, list(cells)
    options = [f"--seconds={args.seconds}", f"--ppo-steps={args.ppo_steps}", f"--train-iters={args.train_iters}"]
    while pending:
        command = [sys.executable, "-m", "benchmarks.warpdrive", "--worker", *options, f"--until={args.until}"]
        proc = subprocess.Popen([*command, "--cells", *pending], stdout=subprocess.PIPE, text=True, cwd=REPO)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=pump, args=(proc.stdout, lines), daemon=True).start()
        current, answered = None, False
        while True:
            try:
                line = lines.get(timeout=args.cell_timeout)
            except queue.Empty:
                proc.kill()
                reason = f"nothing heard for {args.cell_timeout:g} s: worker killed"
                break
            if line is None:
                reason = f"worker exited with status {proc.wait()}"
                break
            said, _, marked = line.partition(MARK)  # a marked line may follow output that did not end its line
            sys.stderr.write(said + ("\n" if marked and said else ""))
            if not marked:
                continue
            message = json.loads(marked)
            current = message.get("start", current)
            if "meta" in message:
                report.header(message["meta"])
            if "result" in message:
                report.row(message["result"])
                pending.remove(message["result"]["cell"])
                current, answered = None, True
        proc.wait()
        for cell in [current] if current else ([] if answered else list(pending)):  # a worker that never began
            report.row({**parse_cell(cell), "error": reason})
            pending.remove(cell)


TABLES = {
    "tag": ("WarpDrive TagContinuous (numba), random actions", ("envs", "agents", "num_observed"), "agent steps/s"),
    "cartpole": ("WarpDrive CartPole (numba), random actions", ("envs",), None),
    "ppo": ("WarpDrive PPO trainer (1 epoch x 1 minibatch)", ("envs", "steps_per_env"), "env-step share"),
}
"""Per table: its title, the fields that name a row, and the column after env steps/s (None: none)."""


class Report:
    """Markdown rows printed as cells end (a run cut short keeps them), the records rewritten to ``--out``."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.meta, self.records = args, {}, []

    def header(self, meta: dict[str, Any]) -> None:
        if not self.meta:
            versions = ", ".join(f"{k} {meta[k]}" for k in ("torch", "cuda", "numpy", "numba", "numba-cuda", "gym"))
            print(f"# WarpDrive {meta['rl-warp-drive']} (numba) on {meta['gpu']} ({versions}, Python {meta['python']})")
            print("# env steps/s: steps of the whole batch x environments (env steps, not agent steps)", flush=True)
        self.meta = meta

    def row(self, r: dict[str, Any]) -> None:
        title, names, extra = TABLES[r["table"]]
        if all(done["table"] != r["table"] for done in self.records):
            print(f"\n| {title} | " + " | ".join([*names, "env steps/s", *([extra] if extra else [])]) + " |")
            print("|---|" + "---:|" * (len(names) + 1 + bool(extra)))
        cells = [f"{r.get(name, '')}" for name in names]
        if r.get("error"):
            cells.append(f"failed: {r['error']}" if "not run" not in r["error"] else r["error"])
        else:
            cells.append(f"{r['env_steps_per_s']:,.0f}")
            cells += [f"{r['agent_steps_per_s']:,.0f}"] if r["table"] == "tag" else []
            cells += [f"{r['env_share']:.0%}"] if r["table"] == "ppo" else []
        print(f"| {r['cell']} | " + " | ".join(cells) + " |", flush=True)
        self.records.append(r)
        if self.args.out:
            with open(self.args.out, "w", encoding="utf8") as file:
                json.dump({"meta": self.meta, "args": vars(self.args), "cells": self.records}, file, indent=1)


def cells_for(args: argparse.Namespace) -> list[str]:
    """The cells of ``args.sections``, in that order (cheap sections first by default)."""
    sizes = args.sizes or (["1x10", "100x100"] if args.quick else list(SIZES))
    observed = [(size, o) for size in sizes for o in (8, 0) if o or int(size.split("x")[1]) <= ALL_OTHERS_UP_TO]
    sections = {
        "cartpole": [f"cartpole:{n}" for n in args.cartpole_envs or ((4096,) if args.quick else CARTPOLE_ENVS)],
        "ppo": [f"ppo:{n}" for n in args.ppo_envs or ((8192,) if args.quick else PPO_ENVS)],
        "tag": [f"tag:{size}:{o}" for size, o in observed],
    }
    return [cell for section in args.sections.split(",") if section for cell in sections[section]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="0.3 s per cell, small sizes, 2 PPO iterations")
    parser.add_argument("--sections", default="cartpole,ppo,tag", help="comma-separated, in this order")
    parser.add_argument("--sizes", nargs="+", metavar="ENVSxAGENTS", help=f"Tag sizes (default {' '.join(SIZES)})")
    parser.add_argument("--cartpole-envs", nargs="+", type=int, help=f"default {CARTPOLE_ENVS}")
    parser.add_argument("--ppo-envs", nargs="+", type=int, help=f"default {PPO_ENVS}")
    parser.add_argument("--ppo-steps", type=int, default=32, help="steps per env per PPO iteration (msrl's 32)")
    parser.add_argument("--train-iters", type=int, default=None, help="timed PPO iterations (default 10; quick 2)")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per env cell (default 2)")
    parser.add_argument("--budget", type=float, default=None, help="start no cell after this many seconds")
    parser.add_argument("--cell-timeout", type=float, default=300.0, help="kill a worker silent this long (s)")
    parser.add_argument("--out", help="also write the records as JSON to this file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--until", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--cells", nargs="+", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if unknown := set(args.sections.split(",")) - {"cartpole", "ppo", "tag", ""}:
        parser.error(f"--sections: unknown {', '.join(sorted(unknown))}; choose from cartpole, ppo, tag")
    args.seconds = args.seconds if args.seconds is not None else (0.3 if args.quick else 2.0)
    args.train_iters = args.train_iters if args.train_iters is not None else (2 if args.quick else 10)
    args.until = args.until or (time.time() + args.budget if args.budget else 0.0)
    apply_shims()
    logging.getLogger().setLevel(logging.ERROR)  # as WarpDrive's example script sets it
    if args.worker:
        return worker(args.cells, args)
    run_workers(cells_for(args), Report(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
