"""Multi-agent training end to end: MAPPO and IPPO on MPE simple_spread and Tag, and QMIX and MADDPG
on simple_spread, written once and run under the distribution presets unchanged; agent steps and
per-group returns in the metrics; configuration mistakes are one line before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import msrl
import msrl.envs
from msrl.app import load_config

REPO = Path(__file__).resolve().parents[2]
SPREAD = str(REPO / "configs" / "mappo_simple_spread.yaml")
SPREAD_KWARGS = load_config(SPREAD).algo.env_kwargs
"""simple_spread's rules in the shipped config (the MAPPO paper's fork's integrator)."""
EVAL_SPREAD = 256
"""Greedy episodes of a simple_spread learning check and of the random policy it is compared with:
a 256-episode mean's standard error is about 0.45 per agent (a 32-episode mean's is 1.3: the random
policy's 32-episode figure at seed 7, -28.4, sits 2 below its 256-episode one, -26.3)."""
MARGIN_SPREAD = 2.5
"""Per-agent return above the random policy's (``random_spread_return``) that MAPPO must reach in
CI's budget: about four standard errors of the difference of two 256-episode means."""
TAG = str(REPO / "configs" / "ippo_tag.yaml")
CI_ENVS = "algo.num_envs=16"
"""The shipped config runs the paper's 128 environments; CI's budgets run 16, so a short run still
gets many updates (100k steps: 250 iterations instead of 31).  Seed 1, greedy over 256 episodes,
the shipped rules (2026-11-29): -23.7 at 60k steps, -21.9 at 100k, -22.2 at 150k, against the
random policy's -26.3 and the bar of -23.8."""
CI_SPREAD = ["progress=false", CI_ENVS, f"eval_episodes={EVAL_SPREAD}"]
"""CI's simple_spread learning checks: 16 envs, 256 greedy episodes (add the budget)."""


def random_policy_return(env_id: str, episodes: int, seed: int, **kwargs) -> float:
    """Mean per-agent return of uniformly random actions, counted as evaluation counts it."""
    env = msrl.envs.make(env_id, num_envs=episodes, seed=seed, **kwargs)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    returns, running = np.zeros(episodes), np.ones(episodes, dtype=bool)
    while running.any():
        actions = {
            g: rng.integers(0, group.action_space.n, (episodes, group.num_agents)) for g, group in env.groups.items()
        }
        _, rewards, terminated, truncated = env.step(actions)
        total = sum(np.asarray(r).sum(1) for r in rewards.values()) / env.num_agents
        returns += np.where(running, total, 0.0)
        running &= ~((np.asarray(terminated) + np.asarray(truncated)) > 0)
    return float(returns.mean())


def random_spread_return() -> float:
    """A uniformly random policy's per-agent return on the shipped config's simple_spread."""
    return random_policy_return("simple_spread_v3", EVAL_SPREAD, seed=7, **SPREAD_KWARGS)


@pytest.mark.landing  # a learning run of 26-33 s on the 2-core VM: CI's tier after the default suite
def test_mappo_beats_a_random_policy_on_simple_spread(tmp_path: Path) -> None:
    random_return = random_spread_return()
    run = msrl.train(SPREAD, [f"runs_dir={tmp_path}", "total_env_steps=100000", *CI_SPREAD])
    assert run.metrics[-1]["agent_steps"] == 3 * run.metrics[-1]["env_steps"]
    assert "episode_return/agents" in run.metrics[-1]
    assert run.evaluation.mean >= random_return + MARGIN_SPREAD, (run.evaluation.mean, random_return)


@pytest.mark.slow  # about 40 s; MAPPO on simple_spread stays the default suite's multi-agent learning check
def test_taggers_learn_to_tag(tmp_path: Path) -> None:
    """With no step or edge penalties a tagger's return is tag_reward_for_tagger (1) per runner it
    tags: its rise over training is the tag rate rising.  A 20 x 20 world with runners at 0.4 of the
    taggers' top speed makes random tags rare and chasing pay; 64 envs per record keep each
    record's mean within ~0.1 tags, and records are weighted by their episodes (one that closes a
    single early-finished game says little).  The runners learn too, with tagged runners out of
    their losses (active masks), so the tag rate rises more slowly than the taggers' skill."""
    run = msrl.train(
        TAG,
        [
            f"runs_dir={tmp_path}",
            "progress=false",
            "total_env_steps=128000",
            "algo.env_kwargs.step_penalty_for_tagger=0.0",
            "algo.env_kwargs.edge_hit_penalty=0.0",
            "algo.env_kwargs.world_size=20.0",
            "algo.env_kwargs.runner_max_speed=0.4",
            "algo.num_envs=64",
            "algo.num_steps=25",
        ],
    )
    records = [(r["episode_return/taggers"], r["episodes"]) for r in run.metrics if "episode_return/taggers" in r]

    def mean(part: list[tuple[float, float]]) -> float:
        return sum(tags * n for tags, n in part) / sum(n for _, n in part)

    early, late = mean(records[:3]), mean(records[-3:])
    assert late >= early + 0.3, (early, late)  # seed 1: 1.49 -> 2.00 tags per tagger per 100-step game
    assert run.metrics[-1]["agent_steps"] == 10 * run.metrics[-1]["env_steps"]


def _tag_active_fractions(tmp_path: Path, *sets: str) -> list[float]:
    run = msrl.train(
        TAG,
        [f"runs_dir={tmp_path}", "progress=false", "total_env_steps=3200", "eval_episodes=2", "algo.update_epochs=1"]
        + list(sets),
    )
    return [m["active_fraction"] for m in run.metrics]


@pytest.mark.parametrize("preset", ["local", pytest.param("single_learner_fine", marks=pytest.mark.slow)])
def test_tagged_runners_leave_the_losses_on_tag(preset: str, tmp_path: Path) -> None:
    """Tag-v0 says who is in the game (``active()``), so IPPO's active masks take tagged runners'
    later steps out of the losses: the learner's ``active_fraction`` (agent steps in the game over
    all agent steps) falls below 1 as runners are tagged, and is 1 with the masks off.  Under
    single_learner_fine the flags cross fragments every step.  Seed 1: about 0.75 and 0.52 in the
    two iterations."""
    masked = _tag_active_fractions(tmp_path, f"policy={preset}")
    assert len(masked) == 2 and all(0.2 < f < 0.95 for f in masked), masked
    assert masked[1] < masked[0]  # episodes of 100 steps: the second 50 have fewer runners left
    assert _tag_active_fractions(tmp_path, f"policy={preset}", "algo.active_masks=false") == [1.0, 1.0]


@pytest.mark.slow
def test_mappo_runs_unchanged_when_every_step_crosses_fragments(tmp_path: Path) -> None:
    """single_learner_fine gathers every group's observations to the one actor and scatters their
    actions back to the environment replicas every step."""
    run = msrl.train(
        SPREAD,
        [
            f"runs_dir={tmp_path}",
            "progress=false",
            "total_env_steps=1600",
            CI_ENVS,
            "eval_episodes=2",
            "policy=single_learner_fine",
        ],
    )
    assert run.env_steps == 1600 and run.metrics[-1]["agent_steps"] == 4800
    assert {"episode_return", "episode_return/agents", "policy_loss", "time_communication"} <= set(run.metrics[-1])


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["single_learner_coarse", "multi_learner", "async_single_learner", "gpu_only"])
def test_mappo_runs_under_the_other_presets(preset: str, tmp_path: Path) -> None:
    extra = ["policy.device=cpu"] if preset == "gpu_only" else []
    run = msrl.train(
        SPREAD,
        [
            f"runs_dir={tmp_path}",
            "progress=false",
            "total_env_steps=3200",
            CI_ENVS,
            "eval_episodes=2",
            f"policy={preset}",
            *extra,
        ],
    )
    assert run.env_steps >= 3200 and "episode_return/agents" in run.metrics[-1]


@pytest.mark.slow  # 25-170 s a run on 2 cores (Ray workers start for each)
@pytest.mark.parametrize(
    "preset", ["single_learner_coarse", "single_learner_fine", "multi_learner", "async_single_learner", "gpu_only"]
)
@pytest.mark.parametrize("algorithm", ["qmix", "maddpg"])
def test_the_episode_replay_algorithms_run_under_every_preset(algorithm: str, preset: str, tmp_path: Path) -> None:
    """QMIX (VDN is its mixer option) and MADDPG, unchanged, under each Ray preset: whole
    episodes into the replay, updates from it, the greedy evaluation at the end."""
    extra = ["policy.device=cpu"] if preset == "gpu_only" else []
    overrides = [f"runs_dir={tmp_path}", "progress=false", "total_env_steps=8000", "eval_episodes=4"]
    run = msrl.train(
        str(REPO / "configs" / f"{algorithm}_simple_spread.yaml"), [*overrides, f"policy={preset}", *extra]
    )
    assert run.env_steps >= 8000 and run.evaluation is not None and len(run.evaluation.returns) == 4
    key = "td_loss" if algorithm == "qmix" else "q_loss"
    losses = [r[key] for r in run.metrics if key in r]
    assert losses and all(np.isfinite(losses))


def _train_error(config: str, tmp_path: Path, *sets: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "msrl",
            "train",
            config,
            "--set",
            f"runs_dir={tmp_path}",
            *[arg for s in sets for arg in ("--set", s)],
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert not any(tmp_path.iterdir())  # nothing started, nothing written
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_group_without_a_policy_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "tag.yaml"
    config.write_text(Path(TAG).read_text().replace("    runners: runner\n", ""))
    runs = tmp_path / "runs"
    runs.mkdir()
    line = _train_error(str(config), runs)
    assert line == (
        "msrl: error: group 'runners' of Tag-v0 has no policy in algo.policies; give every group one: taggers, runners"
    )


def test_a_single_agent_env_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        msrl.ConfigError,
        match="^mappo needs a multi-agent environment \\(one with agent groups\\); "
        "CartPole-v1 has a single agent: use ppo$",
    ):
        msrl.train(SPREAD, [f"runs_dir={tmp_path}", "algo.env_id=CartPole-v1", "algo.env_kwargs={}"])
    assert not any(tmp_path.iterdir())


def test_a_keyword_the_environment_does_not_take_is_one_line(tmp_path: Path) -> None:
    """The shipped config's simple_spread keywords given to another environment, and a misspelt
    one, are refused before anything starts, naming the environment's keywords."""
    line = _train_error(SPREAD, tmp_path, "algo.env_id=Tag-v0")
    assert line.startswith("msrl: error: Tag-v0 takes no keyword 'integrator'; its keywords: num_taggers, "), line
    line = _train_error(SPREAD, tmp_path, "algo.env_kwargs.integrater=explicit")
    assert line == (
        "msrl: error: simple_spread_v3 takes no keyword 'integrater'; its keywords: N, local_ratio, max_cycles, "
        "continuous_actions, landmark_range, shared_reward, integrator"
    )


def test_a_centralised_critic_too_large_for_the_agents_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        msrl.ConfigError,
        match="^a centralised critic would take a global state of .* use "
        "algo.critic: decentralised \\(IPPO\\) for 202 agents$",
    ):
        msrl.train(TAG, [f"runs_dir={tmp_path}", "algo.critic=centralised", "algo.env_kwargs.num_runners=200"])
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("setting", ["algo.value_norm=maybe", "algo.huber_delta=-1", "algo.activation=gelu"])
def test_a_bad_paper_setting_is_one_line(setting: str, tmp_path: Path) -> None:
    line = _train_error(SPREAD, tmp_path, setting)
    assert line.startswith("msrl: error: algo.") and setting.split("=")[0] in line, line
