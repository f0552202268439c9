"""How the learning gate's bands follow from a calibration (msrl.app.gate): the stored bands are
what the rules give for the calibrations recorded beside them, every band written can fail (a return
floor above a random policy's return, a seeds-reaching count of at least one, a steps bound inside
the budget), and the random policy's return the floors stand on is what a random policy gets."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import msrl.envs
from msrl.app import gate

ROW = gate.GATE_ROWS["a2c_cartpole"]
NOISY = {  # a row whose seeds scatter from 96 to 500, as A2C's calibration did
    "seeds": list(range(8)),
    "final_return_mean": 348.11,
    "final_return_std": 186.66,
    "steps_to_threshold_mean": 99560.0,
    "steps_to_threshold_std": 47145.6,
    "training_return_mean": 276.97,
    "training_return_std": 92.12,
    "reached": "5/8",
    "command": "calibration",
    "date": "today",
}
OWN = {"final_return_mean": 232.07, "reached": 1, "steps_to_threshold_mean": 121653.3, "training_return_mean": 211.79}


def test_the_stored_bands_are_what_the_rules_give_for_their_recorded_calibrations() -> None:
    stored = gate.load_json(gate.BANDS_FILE, "bands file")
    assert gate.rederive(stored) == stored["rows"]


def test_a_noisy_row_gets_floors_above_chance_and_no_band_that_cannot_fail() -> None:
    bands = gate.bands_for(ROW, 150_000, "CartPole-v1", NOISY, OWN)
    chance = gate.RANDOM_RETURN["CartPole-v1"]
    # 3 standard errors of a 3-seed mean reach below zero: the floor is 25 above chance instead
    assert bands["final_return_mean"] == {"min": chance + 25.0, "measured": 232.07}
    assert bands["training_return_mean"]["min"] == pytest.approx(211.79 - 3 * 92.12 / 3**0.5, abs=0.05)
    assert bands["reached"] == {"min": 1, "measured": 1}  # 5/8 of 3 seeds: 2 expected, 1 required
    assert "steps_to_threshold_mean" not in bands  # its bound would pass the budget
    assert bands["unbanded"]["steps_to_threshold_mean"]["measured"] == 121653.3
    assert "past the budget" in bands["unbanded"]["steps_to_threshold_mean"]["why"]


def test_a_row_that_rarely_reaches_the_threshold_gets_no_reaching_band() -> None:
    rare = {**NOISY, "reached": "1/8"}
    bands = gate.bands_for(ROW, 150_000, "CartPole-v1", rare, {**OWN, "reached": 0})
    assert "reached" not in bands and "too few to require one" in bands["unbanded"]["reached"]["why"]
    often = gate.bands_for(ROW, 150_000, "CartPole-v1", {**NOISY, "reached": "8/8"}, OWN)
    assert often["reached"]["min"] == 2


def test_a_tight_row_keeps_the_bands_its_spread_gives() -> None:
    tight = {**NOISY, "final_return_mean": 500.0, "final_return_std": 0.0, "steps_to_threshold_mean": 56576.0}
    tight.update(steps_to_threshold_std=14354.3, training_return_mean=329.86, training_return_std=28.15)
    own = {"final_return_mean": 500.0, "reached": 3, "steps_to_threshold_mean": 43008.0, "training_return_mean": 344.3}
    bands = gate.bands_for(ROW, 100_000, "CartPole-v1", {**tight, "reached": "8/8"}, own)
    assert bands["final_return_mean"]["min"] == 475.0
    assert bands["steps_to_threshold_mean"]["max"] == 81438
    assert bands["training_return_mean"]["min"] == 281.1
    assert "unbanded" not in bands


def test_every_stored_band_can_fail() -> None:
    for name, band in gate.load_json(gate.BANDS_FILE, "bands file")["rows"].items():
        chance = gate.RANDOM_RETURN[band["env_id"]]
        assert band["final_return_mean"]["min"] > chance and band["training_return_mean"]["min"] > chance, name
        assert band.get("reached", {"min": 1})["min"] >= 1, name
        assert band.get("steps_to_threshold_mean", {"max": 0})["max"] < band["budget"], name
        for metric, entry in band.get("unbanded", {}).items():
            assert metric not in band and entry["why"], name


def test_rederive_refuses_a_row_the_gate_does_not_have() -> None:
    stored = copy.deepcopy(gate.load_json(gate.BANDS_FILE, "bands file"))
    stored["rows"]["sac_cartpole"] = stored["rows"]["a2c_cartpole"]
    with pytest.raises(gate.BandsError, match="row 'sac_cartpole' the gate does not"):
        gate.rederive(stored)


def test_the_random_return_is_what_a_random_policy_gets_on_cartpole() -> None:
    """The first 8 episodes of each of 500 environments (4,000, a standard error of 0.2), each env's
    first ones so that short episodes are not over-counted."""
    env = msrl.envs.make("CartPole-v1", 500, seed=0, backend="numpy")
    env.reset()
    rng = np.random.default_rng(0)
    running, returns = np.zeros(500), [[] for _ in range(500)]
    while min(len(r) for r in returns) < 8:
        _, reward, terminated, truncated = env.step(rng.integers(0, 2, 500))
        running += reward
        for i in np.flatnonzero((terminated + truncated) > 0):
            returns[i].append(running[i])
            running[i] = 0.0
    mean = float(np.mean([r for per_env in returns for r in per_env[:8]]))
    assert mean == pytest.approx(gate.RANDOM_RETURN["CartPole-v1"], abs=1.0)
