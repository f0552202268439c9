"""How well do the multi-agent algorithms learn?  MAPPO, IPPO, QMIX, VDN and MADDPG on
simple_spread over seeds, and IPPO's Tag curves.

``spread``: ``configs/mappo_simple_spread.yaml`` (the MAPPO paper's settings) at a reduced budget,
MAPPO and IPPO (the same config with ``algo.critic=decentralised``) interleaved seed by seed, one
torch thread.  Each run records its training curve (``episode_return``, the per-agent return of
the sampled policy) and its greedy evaluation over 32 episodes; both are also given in the paper's
units (below).  ``tag``: a short run of ``configs/ippo_tag.yaml``; every ``--every`` iterations the
policies as trained so far (``msrl.load`` of a checkpoint) play ``--episodes`` fresh Tag episodes,
which give the taggers' tag rate (runners tagged per tagger per episode) and the runners' survival
time (steps in the game, the episode's length for one never tagged), saved as PNG curves.

    OMP_NUM_THREADS=1 python -m benchmarks.marl_learning spread --seeds 1 2 3 4 5 --steps 300000 --out spread.jsonl
    OMP_NUM_THREADS=1 python -m benchmarks.marl_learning tag --steps 200000 --out tag.jsonl
    python -m benchmarks.marl_learning report spread.jsonl tag.jsonl --figure spread_300k   # tables, figures

The paper's units.  The MAPPO paper's code (marlbenchmark/on-policy, its MPE fork) gives every agent
the *sum* over agents of ``g - (1 + c_i)`` per step (``g`` minus the summed distances from each
landmark to its nearest agent, ``c_i`` the other agents within collision distance of agent ``i``;
its loop over agents counts the agent's own disc, the 1), and reports the mean of that over 25
steps: ``3 sum_t g - 75 - sum_t sum_i c_i`` per episode.  msrl's (mpe2's) simple_spread_v3 gives
agent ``i`` ``0.5 g - 0.5 c_i`` and msrl reports the mean over agents of their episode returns,
``R = 0.5 sum_t g - (1/6) sum_t sum_i c_i``; so the paper's figure is ``6 R - 75`` for the same
trajectories.  (The paper's fork also draws landmarks from ``0.8 [-1, 1)^2``, mpe2 from ``[-1,
1)^2``, and moves an agent in the step of its action, mpe2 a step later: the tasks differ by that
much, which no conversion removes.)  ``spread --rules fork`` runs simple_spread under the fork's
three rules instead (``landmark_range`` 0.8, ``shared_reward``, the ``semi-implicit`` integrator:
``msrl.envs.simple_spread``'s docstring); its per-agent return is then the paper's figure itself.
The shipped config has the fork's integrator and mpe2's reward and landmarks (a record without
``env_kwargs`` ran a config of mpe2's three rules); ``--rules mpe2`` runs mpe2's integrator.  Each
record keeps the environment's keywords it ran with (``env_kwargs``).

EPyMARL beside msrl. ``spread --epymarl DIR`` also runs, seed by seed after msrl's, EPyMARL's own
config of each chosen algorithm (``src/main.py --config=<algorithm> --env-config=gymma`` on
``pz-mpe-simple-spread-v3``, 25 steps, greedy tests of ``--eval`` episodes at ten points) from a
checkout ``DIR`` (``git clone https://github.com/uoe-agents/epymarl``). Its MPE is PettingZoo's,
which PettingZoo 1.25 moved out to mpe2: its Python path needs ``sacred`` and
``pettingzoo[mpe]<1.25`` in a folder of their own (``pip install --target DEPS sacred
"pettingzoo[mpe]==1.24.3" "setuptools<70"``, sacred importing ``pkg_resources``; then delete
``DEPS``'s numpy, gymnasium, packaging and cloudpickle so msrl's are used), given as
``--epymarl-path DEPS``; its ``envs/__init__.py`` imports ``smaclite`` (a package on GitHub only)
even for MPE runs, so the run puts an empty module of that name on the path. It runs mpe2's rules
(PettingZoo 1.24.3's simple_spread_v3 gives mpe2 1.1.1's observations and rewards to the bit for the
same seed and actions), so ``--rules mpe2`` is required. EPyMARL sums the agents' rewards into the
team's; its returns are recorded divided by the number of agents, msrl's per-agent mean, so the
tables read alike.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import msrl
import msrl.envs
from benchmarks.harness import FIGURES, REPO, append_jsonl, machine_info, read_jsonl, table_head, table_row
from msrl.app import Trainer, load_config

SPREAD = str(REPO / "configs" / "mappo_simple_spread.yaml")
TAG = str(REPO / "configs" / "ippo_tag.yaml")
SPREAD_RUNS = {
    "mappo": (SPREAD, ["algo.critic=centralised"]),
    "ippo": (SPREAD, ["algo.critic=decentralised"]),
    "qmix": (str(REPO / "configs" / "qmix_simple_spread.yaml"), []),
    "vdn": (str(REPO / "configs" / "vdn_simple_spread.yaml"), []),
    "maddpg": (str(REPO / "configs" / "maddpg_simple_spread.yaml"), []),
}
"""``spread --algorithms``: each one's config and its overrides (IPPO is MAPPO's config with each
agent's critic on its own observation).  QMIX, VDN and MADDPG train from whole episodes at
EPyMARL's settings, MAPPO and IPPO at the MAPPO paper's."""


SHARED = "algo.env_kwargs.shared_reward=true"
FORK_RULES = ["algo.env_kwargs.landmark_range=0.8", SHARED, "algo.env_kwargs.integrator=semi-implicit"]
RULES = {
    "shipped": ["algo.env_kwargs.integrator=semi-implicit"],
    "mpe2": ["algo.env_kwargs.integrator=explicit"],
    "fork": FORK_RULES,
}
"""``spread --rules``: the overrides that give each set of simple_spread's rules, whichever
algorithm's config runs (``shipped``: MAPPO's config's rules, the fork's integrator)."""


ENV_KWARGS = "algo.env_kwargs."


def record_kwargs(record: dict[str, Any]) -> dict[str, str]:
    """The environment keywords a record ran with, as lower-case words.  A record without
    ``env_kwargs`` ran a config with mpe2's rules and no keywords of its own, so its overrides alone
    say what differed."""
    kwargs = record.get("env_kwargs")
    if kwargs is None:
        pairs = (o.removeprefix(ENV_KWARGS).split("=", 1) for o in record["overrides"] if o.startswith(ENV_KWARGS))
        kwargs = dict(pairs)
    return {key: str(value).lower() for key, value in kwargs.items()}


def rules_name(record: dict[str, Any]) -> str:
    """Which of simple_spread's rules a record ran under, in words."""
    words = record_kwargs(record)
    integrator = words.pop("integrator", "explicit")
    if words == {"landmark_range": "0.8", "shared_reward": "true"} and integrator == "semi-implicit":
        return "the fork's rules"
    named = "the fork's integrator" if integrator == "semi-implicit" else "mpe2's rules"
    return " ".join([named, *(f"{key}={value}" for key, value in words.items())])


def paper_units(per_agent_return: float, steps: int = 25) -> float:
    """msrl's per-agent simple_spread return (mpe2's rules) as the MAPPO paper's code counts an episode."""
    return 6.0 * per_agent_return - 3.0 * steps


def paper_scale(record: dict[str, Any]) -> tuple[Any, float]:
    """How a run's per-agent returns read in the paper's units, and the factor for a spread: under
    the fork's shared reward they are the paper's figure already."""
    if record_kwargs(record).get("shared_reward") == "true":
        return (lambda r: r), 1.0
    return paper_units, 6.0


# -- simple_spread ------------------------------------------------------------------------------------
def spread_run(algorithm: str, seed: int, steps: int, extra: list[str]) -> dict[str, Any]:
    config, own = SPREAD_RUNS[algorithm]
    overrides = [f"seed={seed}", f"total_env_steps={steps}", *own, *extra]
    with tempfile.TemporaryDirectory() as runs:
        start = time.perf_counter()
        run = msrl.train(config, [f"runs_dir={runs}", "progress=false", "checkpoint_every=0", *overrides])
        wall = time.perf_counter() - start
    curve = [(r["env_steps"], r["episode_return"]) for r in run.metrics if "episode_return" in r]
    last = [ret for _, ret in curve[-5:]]
    return {
        "kind": "spread",
        "algorithm": algorithm,
        "seed": seed,
        "env_steps": run.env_steps,
        "overrides": extra,
        "env_kwargs": load_config(config, overrides).algo.env_kwargs,
        "greedy_return": run.evaluation.mean,
        "greedy_episodes": run.evaluation.episodes,
        "train_return_last5": float(np.mean(last)),
        "curve": curve,
        "wall_s": wall,
    }


EPYMARL_KEY = "pz-mpe-simple-spread-v3"
"""EPyMARL's name of simple_spread: PettingZoo's ``mpe.simple_spread_v3`` through its gymma wrapper."""

SPREAD_AGENTS = 3
"""The agents of EPyMARL's simple_spread: PettingZoo's default N, which its key makes (no N passes
through ``env_args``).  EPyMARL reports the agents' summed return; the records are per agent."""


def epymarl_run(
    algorithm: str, seed: int, steps: int, checkout: Path, path: list[str], eval_episodes: int
) -> dict[str, Any]:
    """EPyMARL's own ``algorithm`` config on simple_spread for ``steps`` env steps, read back from
    the run's sacred ``metrics.json``: the last greedy test and the training returns, per agent."""
    runs = checkout / "results" / "sacred" / algorithm / EPYMARL_KEY
    before = set(runs.glob("[0-9]*")) if runs.exists() else set()
    with tempfile.TemporaryDirectory() as stand_in:
        (Path(stand_in) / "smaclite").mkdir()
        (Path(stand_in) / "smaclite" / "__init__.py").write_text("")  # imported at start-up, unused on MPE
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, stand_in]), "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "src/main.py", f"--config={algorithm}", "--env-config=gymma", "with"]
        command += [f"env_args.key={EPYMARL_KEY}", "env_args.time_limit=25", f"seed={seed}", f"t_max={steps}"]
        command += [f"test_nepisode={eval_episodes}", f"test_interval={max(steps // 10, 1)}", "use_cuda=False"]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
    new = sorted(set(runs.glob("[0-9]*")) - before, key=lambda p: int(p.name))
    if done.returncode != 0 or not new:
        raise SystemExit(
            f"msrl: error: EPyMARL's {algorithm} run failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
        )
    metrics = json.loads((new[-1] / "metrics.json").read_text())
    train, test = metrics["return_mean"], metrics["test_return_mean"]
    curve = [(t, v / SPREAD_AGENTS) for t, v in zip(train["steps"], train["values"])]
    return {
        "kind": "spread",
        "framework": "epymarl",
        "algorithm": algorithm,
        "seed": seed,
        "env_steps": steps,
        "overrides": [],
        "env_kwargs": {"integrator": "explicit"},
        "greedy_return": test["values"][-1] / SPREAD_AGENTS,
        "greedy_episodes": eval_episodes,
        "train_return_last5": float(np.mean([v for _, v in curve[-5:]])),
        "curve": curve,
        "wall_s": wall,
        "sacred_run": str(new[-1]),
    }


# -- Tag ------------------------------------------------------------------------------------------------
def tag_statistics(algorithm: Any, env_kwargs: dict[str, Any], episodes: int, seed: int) -> dict[str, float]:
    """One episode in each of ``episodes`` fresh environments with the policies sampling their
    actions.  A runner is tagged in the step its reward carries ``tag_penalty_for_runner``
    (-1 against at most +-1.1 of step, edge and end-of-game rewards at the default constants)."""
    env = msrl.envs.make("Tag-v0", num_envs=episodes, seed=seed, **env_kwargs)
    try:
        taggers = env.groups["taggers"].num_agents
        runners = env.groups["runners"].num_agents
        obs = env.reset(seed=seed)
        running = np.ones(episodes, dtype=bool)
        tagged_at = np.full((episodes, runners), -1)
        length = np.zeros(episodes, dtype=np.int64)
        t = 0
        while running.any():
            actions = algorithm.actor.act(obs)[0]
            obs, rewards, terminated, truncated = env.step(actions)
            hit = (np.asarray(rewards["runners"]) < -0.5) & (tagged_at < 0) & running[:, None]
            tagged_at[hit] = t
            t += 1
            length[running] = t
            running &= ~((np.asarray(terminated) + np.asarray(truncated)) > 0)
        survival = np.where(tagged_at >= 0, tagged_at + 1, length[:, None])
        return {
            "tags_per_tagger": float((tagged_at >= 0).sum(1).mean() / taggers),
            "runner_survival_steps": float(survival.mean()),
            "runners_left_at_end": float((tagged_at < 0).mean()),
            "episode_length": float(length.mean()),
        }
    finally:
        env.close()


def tag_run(steps: int, every: int, episodes: int, extra: list[str]) -> dict[str, Any]:
    config = msrl.app.load_config(TAG, extra)
    env_kwargs = dict(config.algo.env_kwargs)
    points = []
    with tempfile.TemporaryDirectory() as runs:
        start = time.perf_counter()
        overrides = [f"runs_dir={runs}", "progress=false", "checkpoint_every=0", "eval_episodes=0"]
        with Trainer(TAG, [*overrides, f"total_env_steps={steps}", *extra]) as trainer:
            while True:
                if trainer.iteration % every == 0 or trainer.done:
                    trainer.save()
                    policy = msrl.load(Path(trainer.run_dir) / "checkpoint.pt")
                    stats = tag_statistics(policy, env_kwargs, episodes, seed=10_000 + trainer.iteration)
                    points.append({"env_steps": trainer.env_steps, **stats})
                    print(json.dumps(points[-1]), flush=True)
                if trainer.done:
                    break
                trainer.step()
        wall = time.perf_counter() - start
    return {
        "kind": "tag",
        "env_steps": steps,
        "overrides": extra,
        "env_kwargs": env_kwargs,
        "episodes": episodes,
        "points": points,
        "wall_s": wall,
    }


# -- report ---------------------------------------------------------------------------------------------
def report(paths: list[str], figure: str = "spread", steps: int | None = None) -> None:
    """The tables of simple_spread runs (grouped by algorithm, budget, rules and other settings) and
    of Tag runs, and their figures: ``FIGURES/<figure>.png`` for simple_spread (an absolute ``figure``
    path is taken as it is), ``FIGURES/tag_ippo_<steps>_tag_rate.png`` and ``..._runner_survival.png``
    for each Tag record."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_jsonl(paths)
    spread = [r for r in records if r["kind"] == "spread" and steps in (None, r["env_steps"])]
    if spread:
        head = ["algorithm", "seeds", "env steps", "greedy, per agent", "greedy, paper units"]
        head += ["training (last 5), per agent", "training, paper units", "wall s per run"]
        print(table_head(head, "llrrrrrr"))
        fig, ax = plt.subplots(figsize=(6, 4))
        # one line per algorithm, budget, rules and other settings (runs of different lengths are
        # not averaged; the same rules read alike whether a run's config or its overrides set them)
        groups: dict[tuple[str, str, int, str, tuple[str, ...]], list[dict[str, Any]]] = {}
        for r in sorted(spread, key=lambda r: (r["algorithm"] != "mappo", r["env_steps"])):
            rest = tuple(o for o in r["overrides"] if not o.startswith(ENV_KWARGS))
            framework = r.get("framework", "msrl")
            groups.setdefault((framework, r["algorithm"], r["env_steps"], rules_name(r), rest), []).append(r)
        for (framework, algorithm, env_steps, rules, rest), rows in groups.items():
            greedy = np.array([r["greedy_return"] for r in rows])
            train = np.array([r["train_return_last5"] for r in rows])
            to_paper, factor = paper_scale(rows[0])
            name = " ".join([f"{algorithm.upper()}{' (EPyMARL)' * (framework == 'epymarl')}, {rules}", *rest])
            print(
                f"| {name} | {', '.join(str(r['seed']) for r in rows)} | {env_steps:,} "
                f"| {greedy.mean():.1f} ± {greedy.std():.1f} "
                f"| {to_paper(greedy.mean()):.0f} ± {factor * greedy.std():.0f} "
                f"| {train.mean():.1f} ± {train.std():.1f} "
                f"| {to_paper(train.mean()):.0f} ± {factor * train.std():.0f} "
                f"| {np.mean([r['wall_s'] for r in rows]):.0f} |"
            )
            n = min(len(r["curve"]) for r in rows)
            at = np.array([p[0] for p in rows[0]["curve"][:n]])
            ys = np.array([[to_paper(p[1]) for p in r["curve"][:n]] for r in rows])
            window = max(1, n // 100)  # a running mean over 1% of the run: long runs stay readable
            kernel = np.ones(window) / window
            mean = np.convolve(ys.mean(0), kernel, mode="valid")
            label = f"{name}, {env_steps / 1e6:.3g}M steps ({len(rows)} seed{'s' * (len(rows) > 1)})"
            label = textwrap.fill(label.replace("algo.", ""), 48)  # the legend stays inside the axes
            ax.plot(at[window - 1 :], mean, label=label)
            if len(rows) > 1:
                low, high = (np.convolve(f(ys, 0), kernel, mode="valid") for f in (np.min, np.max))
                ax.fill_between(at[window - 1 :], low, high, alpha=0.2)
        ax.set_xlabel("env steps")
        ax.set_ylabel("episode reward, MAPPO paper's units")
        ax.set_title("simple_spread_v3, msrl's shipped configs")
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(FIGURES / f"{figure}.png", dpi=100)
        print(f"\nwrote {FIGURES / f'{figure}.png'}")
    for record in (r for r in records if r["kind"] == "tag"):
        points = record["points"]
        xs = [p["env_steps"] for p in points]
        for key, label, name in (
            ("tags_per_tagger", "runners tagged per tagger per episode", "tag_rate"),
            ("runner_survival_steps", "runner survival (steps in the game)", "runner_survival"),
        ):
            fig, ax = plt.subplots(figsize=(6, 4))
            ax.plot(xs, [p[key] for p in points], marker="o")
            ax.set_xlabel("env steps")
            ax.set_ylabel(label)
            ax.set_title(f"IPPO on Tag (configs/ippo_tag.yaml), {record['episodes']} episodes per point")
            fig.tight_layout()
            fig.savefig(FIGURES / f"tag_ippo_{record['env_steps'] // 1000}k_{name}.png", dpi=100)
        head = ["env steps", "tags per tagger per episode", "runner survival (steps)", "runners never tagged"]
        print(table_head(head, "rrrr"))
        for p in points:
            cells = [f"{p['env_steps']:,}", f"{p['tags_per_tagger']:.2f}", f"{p['runner_survival_steps']:.1f}"]
            print(table_row([*cells, f"{p['runners_left_at_end']:.0%}"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    spread = sub.add_parser("spread")
    spread.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    spread.add_argument("--steps", type=int, default=300_000)
    spread.add_argument("--algorithms", nargs="+", default=["mappo", "ippo"], choices=sorted(SPREAD_RUNS))
    spread.add_argument(
        "--rules",
        choices=sorted(RULES),
        default="shipped",
        help="simple_spread's rules: the shipped config's (the fork's integrator), mpe2's, or the MAPPO fork's three",
    )
    spread.add_argument("--set", action="append", default=[], help="an extra config override, e.g. algo.num_envs=32")
    spread.add_argument("--epymarl", type=Path, help="an EPyMARL checkout: its config of each algorithm runs too")
    spread.add_argument(
        "--epymarl-path",
        action="append",
        default=[],
        help="a folder for EPyMARL's Python path (sacred, PettingZoo 1.24)",
    )
    spread.add_argument("--eval", type=int, default=32, help="EPyMARL's greedy test episodes (msrl's: the config's)")
    spread.add_argument("--out", required=True)
    tag = sub.add_parser("tag")
    tag.add_argument("--steps", type=int, default=200_000)
    tag.add_argument("--every", type=int, default=10, help="iterations between measurements")
    tag.add_argument("--episodes", type=int, default=64)
    tag.add_argument("--set", action="append", default=[])
    tag.add_argument("--out", required=True)
    rep = sub.add_parser("report")
    rep.add_argument("paths", nargs="+")
    rep.add_argument("--figure", default="spread", help="the simple_spread figure's name in benchmarks/figures/")
    rep.add_argument("--steps", type=int, help="simple_spread runs of this many env steps only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.command == "report":
        report(args.paths, args.figure, args.steps)
        return
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine_info(note='torch threads 1')}")
    if args.command == "spread" and args.epymarl is not None:
        if not (args.epymarl / "src" / "main.py").is_file():
            parser.error(f"--epymarl {args.epymarl}: not an EPyMARL checkout (no src/main.py)")
        if args.rules != "mpe2":
            parser.error("--epymarl runs PettingZoo's simple_spread, mpe2's rules: add --rules mpe2")
    if args.command == "spread":
        extra = [*RULES[args.rules], *args.set]
        for seed in args.seeds:  # interleaved: the machine's load falls on both algorithms alike
            for algorithm in args.algorithms:
                record = spread_run(algorithm, seed, args.steps, extra)
                append_jsonl(args.out, record)
                print(
                    algorithm,
                    seed,
                    f"greedy {record['greedy_return']:.2f}",
                    f"train {record['train_return_last5']:.2f}",
                    f"{record['wall_s']:.0f} s",
                    flush=True,
                )
                if args.epymarl is not None:
                    peer = epymarl_run(algorithm, seed, args.steps, args.epymarl, args.epymarl_path, args.eval)
                    append_jsonl(args.out, peer)
                    print(
                        f"EPyMARL {algorithm}", seed, f"greedy {peer['greedy_return']:.2f}", f"{peer['wall_s']:.0f} s"
                    )
    else:
        append_jsonl(args.out, tag_run(args.steps, args.every, args.episodes, args.set))


if __name__ == "__main__":
    main()
