"""The learning gate's rows: PPO, A2C and DQN on CartPole at reduced budgets, fixed seeds, the
synchronous ``local`` policy, every setting that decides the cost pinned here rather than read from
the shipped config; and the rules by which the bands are set from a calibration's spread."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GateRow:
    """One gate row: a shipped config run under these overrides at this budget for these seeds."""

    config: str
    budget: int
    overrides: tuple[str, ...]
    seeds: tuple[int, ...] = (0, 1, 2)


_SYNC = ("policy=local", "policy.executor=cpu", "policy.cpus=1")
GATE_ROWS: dict[str, GateRow] = {
    # PPO at the settings tests/e2e/test_learning.py trains with (64 envs x 32 steps, 4 epochs of 8
    # minibatches, lr 2.5e-3 annealed over the row's budget), two thirds of that test's budget
    "ppo_cartpole": GateRow(
        "ppo_cartpole",
        100_000,
        (
            *_SYNC,
            "algo.num_envs=64",
            "algo.num_steps=32",
            "algo.learning_rate=2.5e-3",
            "algo.anneal_lr=true",
            "algo.gamma=0.98",
            "algo.gae_lambda=0.8",
            "algo.update_epochs=4",
            "algo.num_minibatches=8",
            "algo.ent_coef=0.0",
        ),
    ),
    # A2C with Adam (16 envs x 5 steps, lr 1e-3 annealed over the row's budget), as the slow learning
    # test runs it, at three quarters of its budget
    "a2c_cartpole": GateRow(
        "a2c_cartpole",
        150_000,
        (
            *_SYNC,
            "algo.num_envs=16",
            "algo.num_steps=5",
            "algo.optimizer=adam",
            "algo.learning_rate=1.0e-3",
            "algo.anneal_lr=true",
            "algo.gamma=0.99",
            "algo.gae_lambda=1.0",
            "algo.ent_coef=0.0",
            "algo.vf_coef=0.5",  # the bands' calibration (the shipped file has SB3's scale, 1.0)
        ),
    ),
    # DQN at CleanRL's dqn.py settings as configs/dqn_cartpole.yaml lays them out (10 envs x 10 steps,
    # then 10 gradient steps; learning from 10k transitions; epsilon 1 -> 0.05 over half the budget),
    # at 150k of the config's 500k env steps
    "dqn_cartpole": GateRow(
        "dqn_cartpole",
        150_000,
        (
            *_SYNC,
            "algo.num_envs=10",
            "algo.train_frequency=10",
            "algo.gradient_steps=10",
            "algo.batch_size=128",
            "algo.buffer_size=10000",
            "algo.learning_starts=10000",
            "algo.learning_rate=2.5e-4",
            "algo.gamma=0.99",
            "algo.target_update_interval=50",
            "algo.tau=1.0",
            "algo.double_dqn=false",
            "algo.loss=mse",
            "algo.max_grad_norm=0",
            "algo.exploration_fraction=0.5",
            "algo.start_epsilon=1.0",
            "algo.end_epsilon=0.05",
            "algo.hidden_sizes=[120, 84]",
        ),
    ),
}
"""The gate's rows.  Their budgets are the gate's own: the shipped configs' ``total_env_steps`` and
the hyper-parameters above are overridden, so a change of a shipped config does not move the gate."""

CALIBRATION_SEEDS = 8
"""Seeds 0..7 of every row are run to write the bands: their spread sets the margins."""
MARGINS: dict[str, float] = {
    "z": 3.0,  # standard errors of a mean over the row's seeds
    "final_return_floor": 25.0,  # the return band is at least this far below (CartPole: returns in [0, 500])
    "steps_floor": 0.1,  # the steps band is at least this fraction of the budget above
    "training_return_floor": 10.0,  # the training-return band is at least this far below
}
"""How the bands are set from the calibration seeds (n of them, the row's own k):
final return mean >= max(m - max(25, z s / sqrt(k)), chance + 25); mean training return (the
learning curve averaged over the run) >= max(m - max(10, z s / sqrt(k)), chance + 10); env steps to
the threshold (mean, not reached = budget) <= m + max(0.1 budget, z s / sqrt(k)); seeds reaching >=
round(k p) - 1.  Here m is the worse of the calibration mean and the row's own seeds' mean, s the
calibration seeds' standard deviation, p the fraction of them that reached the threshold and
chance a random policy's return (``RANDOM_RETURN``).

Every band can fail: a return band never lies within its floor of what a random policy gets, so a
row that stops learning fails it however noisy its seeds were.  A steps band at or past the budget
could not fail (a seed that never reaches the threshold counts as the budget), nor a seeds-reaching
band of 0: such a band is not written, and the row says why (``unbanded``).  A different CPU's
rounding sends a run down another trajectory after a few updates, much as another seed does: the
calibration spread is what such a run may land anywhere within, and z = 3 keeps a false alarm rare."""

RANDOM_RETURN: dict[str, float] = {"CartPole-v1": 22.0}
"""A uniformly random policy's mean episode return per environment: the level a row that learns
nothing lands at, which every return band stays above (CartPole-v1: 22.2 and 22.3 on two seeds of
4,000 episodes of msrl's NumPy CartPole, checked in tests/unit/test_learning_gate_bands.py; a greedy
policy that learned nothing often does worse, a constant action giving about 9)."""
