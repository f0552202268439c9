"""Tag: taggers chase runners on a square world (after WarpDrive's continuous Tag).

Thousands of environments with up to thousands of agents each, on NumPy, torch
and CUDA C kernels, which agree step for step (``msrl.envs.consistency``).  The
rules below are complete: they are what every backend implements.

Agents and groups
-----------------
Each environment has ``num_taggers`` taggers (agents ``0 .. T-1``, group
``taggers``) and ``num_runners`` runners (agents ``T .. N-1``, group ``runners``),
``N = T + R``.  Agent ``i`` has a position ``(x, y)`` in ``[0, world_size]^2``, a
``speed >= 0``, a ``heading`` in ``[0, 2 pi)`` and an ``active`` flag (1 while in
the game, 0 once out; only runners leave, so taggers are always active unless a
state set by hand says otherwise).  The environment also counts its steps ``t``.

State row (``state_dim = 5 N + 1``, float64 on NumPy): ``x[0:N], y[0:N],
speed[0:N], heading[0:N], active[0:N], t``.

Reset: ``x``, ``y`` uniform in ``[0, world_size)``, ``heading`` uniform in
``[0, 2 pi)``, ``speed = 0``, ``active = 1``, ``t = 0``.  (Backends draw from
their own generators: reset states agree in distribution, steps agree exactly.)

Actions
-------
Every agent takes ``Discrete(num_acceleration_levels * num_turn_levels)``;
action ``a`` means acceleration level ``a // num_turn_levels`` and turn level
``a % num_turn_levels``.  Level ``k`` of ``n`` is ``low + k (high - low) / (n -
1)`` (``low`` when ``n == 1``) with ``[low, high]`` = ``[min_acceleration,
max_acceleration]`` and ``[min_turn, max_turn]`` (radians), evaluated in double
precision as ``low + (k * (high - low)) / (n - 1)``.

A step (all agents move at once, then tagging is decided on the new positions)
------------------------------------------------------------------------------
For every agent ``i`` that is active at the start of the step, in any order:

1. ``heading = (heading + turn) mod 2 pi`` (``h - 2 pi floor(h / 2 pi)``).
2. ``speed = min(max(speed + acceleration, 0), max_speed)``, ``max_speed`` being
   ``tagger_max_speed`` or ``runner_max_speed``.
3. ``x += speed cos(heading)``, ``y += speed sin(heading)``.
4. Edge: if ``x`` or ``y`` left ``[0, world_size]`` it is clipped back onto the
   edge and the agent's reward gets ``edge_hit_penalty`` (once per step).
5. Step reward: a tagger gets ``step_penalty_for_tagger``, a runner
   ``step_reward_for_runner``.

Inactive agents (tagged runners) do not move and get reward 0.

Tagging, on the positions after every agent moved: a runner active at the start
of the step is *tagged* when some active tagger lies within ``tagging_distance``
(Euclidean, ``<=``, compared squared: ``dx^2 + dy^2 <= tagging_distance^2`` with
``dx = x_runner - x_tagger``).  A tagged runner's reward gets
``tag_penalty_for_runner``; every tagger gets ``tag_reward_for_tagger`` for each
runner it is within ``tagging_distance`` of that is tagged in this step (``count
* tag_reward_for_tagger``).  With ``runner_exits_game_after_tagged`` a tagged
runner becomes inactive (stays where it is); otherwise it stays in the game and
can be tagged again.

Then ``t += 1``.  When ``t == max_episode_steps`` every runner still active gets
``end_of_game_reward_for_runner``.  The episode *terminates* when no runner is
active (only possible when runners exit) and is *truncated* at
``max_episode_steps`` (``BatchedEnv``'s time limit); either way it restarts in the
same step.  A reward is summed in the state's precision in the order edge
penalty, step reward, tagging, end of game, then rounded to float32.

Observations (the same layout for both groups)
-----------------------------------------------
Agent ``i`` sees its own features ``[x/W, y/W, speed/max_speed_i, cos(heading),
sin(heading), active, t/max_episode_steps]`` (``W = world_size``; 7 numbers), then
for each of ``M`` other agents ``j`` ``[(x_j - x_i)/W, (y_j - y_i)/W,
speed_j/max_speed_j, is_tagger_j, active_j]`` (5 numbers each): ``7 + 5 M`` in
all.  With ``num_observed = 0`` (or ``>= N - 1``) ``M = N - 1`` and the others are
all agents ``j != i`` in index order.  With ``0 < num_observed < N - 1``, ``M =
num_observed`` and the others are the ``M`` nearest by the key ``(d_ij, j)``
(lexicographic; ``d_ij = (x_j - x_i)^2 + (y_j - y_i)^2`` the squared distance,
``+inf`` for an inactive ``j``), in increasing key order.  ``t`` is the count
after the step (an environment that just finished shows its next episode's first
observation, ``t = 0``).  Every number is computed in the state's precision and
rounded to float32 once.

Constants (constructor keyword arguments, so every number comes from the config;
defaults in brackets): ``num_taggers`` [2], ``num_runners`` [8], ``world_size``
[10.0], ``max_episode_steps`` [100], ``num_acceleration_levels`` [3],
``min_acceleration`` [-0.5], ``max_acceleration`` [0.5], ``num_turn_levels`` [5],
``min_turn`` [-pi/4], ``max_turn`` [pi/4], ``tagger_max_speed`` [1.0],
``runner_max_speed`` [0.8], ``tagging_distance`` [1.0], ``tag_reward_for_tagger``
[1.0], ``tag_penalty_for_runner`` [-1.0], ``step_penalty_for_tagger`` [-0.01],
``step_reward_for_runner`` [0.01], ``edge_hit_penalty`` [-0.1],
``end_of_game_reward_for_runner`` [1.0], ``runner_exits_game_after_tagged``
[True], ``num_observed`` [0 = all].

Implementation (NumPy here, torch in ``msrl.envs.tag._torch``, CUDA C in
``tag.cu`` beside them): a step is vectorised over environments *and*
agents, with no Python loop over either.  The pairwise parts (taggers x runners
for tagging, agents x agents for observations) grow as ``N^2`` per environment,
so they run over chunks of environments sized to keep a chunk's temporaries
within ``chunk_bytes`` (64 MiB): 2,000 environments of 1,000 agents never build a
16 GB distance matrix.  The observations themselves are ``N (7 + 5 M)`` floats
per environment: with every other agent observed that is ``O(N^2)`` of output,
and ``num_observed`` is what keeps large ``N`` affordable.

Example::

    >>> env = Tag(num_envs=4, seed=0, num_taggers=1, num_runners=3)
    >>> obs = env.reset()
    >>> obs["taggers"].shape, obs["runners"].shape
    ((4, 1, 22), (4, 3, 22))
    >>> obs, rewards, terminated, truncated = env.step({"taggers": np.zeros((4, 1), int),
    ...                                                  "runners": np.zeros((4, 3), int)})
"""

from __future__ import annotations

from typing import Any

import numpy as np

from msrl.envs._base import Physics
from msrl.envs.tag._base import CHUNK_BYTES, SORT_MAX_AGENTS, TWO_PI, TagBase, env_chunks
from msrl.envs.tag._torch import TorchTag


class NumpyTag(Physics[TagBase]):
    """The rules over float64 arrays, pairwise parts chunked by environment.

    The state row is five blocks of ``N`` (x, y, speed, heading, active) and a
    time; viewed as ``(num_envs, 5, N)`` one operation covers several blocks
    (both coordinates, all four moving quantities), which keeps a step and its
    observations at about sixty NumPy calls: at one environment of ten agents
    their per-call overhead, not arithmetic, is the cost.
    """

    chunk_bytes = CHUNK_BYTES

    def __init__(self, env: TagBase, rng: Any) -> None:
        super().__init__(env, rng)
        self.T, self.N, self.M = env.num_taggers, env.num_agents, env.observed
        self.moves = np.stack(env.action_tables(), -1)  # (actions, 2): acceleration, turn
        self.max_speed = env.max_speeds()
        self.scale = np.stack((np.full(self.N, env.world_size), np.full(self.N, env.world_size), self.max_speed))
        self.step_reward = env.step_rewards()
        self.other_pairs = env.other_pairs()
        self.is_tagger = env.is_tagger()
        self.agents = np.arange(self.N)
        self.tag_distance2 = env.tagging_distance * env.tagging_distance

    def draw_reset(self, n: int) -> np.ndarray:
        N, W = self.N, self.env.world_size
        state = np.zeros((n, 5 * N + 1))
        state[:, : 2 * N] = self.rng.uniform(0.0, W, size=(n, 2 * N))
        state[:, 3 * N : 4 * N] = self.rng.uniform(0.0, TWO_PI, size=(n, N))
        state[:, 4 * N : 5 * N] = 1.0
        return state

    def step(
        self, state: np.ndarray, actions: dict[str, np.ndarray], rewards: dict[str, np.ndarray], terminated: np.ndarray
    ) -> np.ndarray:
        c, N, T = self.env, self.N, self.T
        n = state.shape[0]
        # bools and integral floats index too once cast (the actions are checked)
        a = np.concatenate((actions["taggers"], actions["runners"]), axis=1, dtype=np.intp, casting="unsafe")
        move = self.moves[a]
        old = state[:, : 4 * N].reshape(n, 4, N)  # x, y, speed, heading
        active = state[:, 4 * N : 5 * N] > 0

        moved = np.empty((n, 4, N))
        heading = np.add(old[:, 3], move[..., 1], out=moved[:, 3])
        heading -= TWO_PI * np.floor(heading / TWO_PI)
        speed = np.minimum(np.maximum(old[:, 2] + move[..., 0], 0.0), self.max_speed, out=moved[:, 2])
        position = moved[:, :2]
        np.cos(heading, out=position[:, 0])
        np.sin(heading, out=position[:, 1])
        position *= speed[:, None]
        position += old[:, :2]  # x + speed cos(heading), y + speed sin(heading)
        clipped = np.minimum(np.maximum(position, 0.0), c.world_size)
        hit = (clipped != position).any(1)
        position[...] = clipped
        new = state.copy()
        np.copyto(new[:, : 4 * N].reshape(n, 4, N), moved, where=active[:, None])

        count, tagged = self._tags(new[:, : 2 * N].reshape(n, 2, N), active)
        runners_active = active[:, T:]
        if c.runner_exits_game_after_tagged:
            runners_active = runners_active & ~tagged
            new[:, 4 * N + T : 5 * N] = runners_active
        t = np.add(state[:, 5 * N], 1.0, out=new[:, 5 * N])

        reward = np.where(hit, c.edge_hit_penalty, 0.0)
        reward += self.step_reward
        reward[:, :T] += count * c.tag_reward_for_tagger
        reward[:, T:] += tagged * c.tag_penalty_for_runner
        over = t == c.max_episode_steps
        if over.any():  # a host check is free on NumPy; most steps skip the bonus
            reward[:, T:] += (runners_active & over[:, None]) * c.end_of_game_reward_for_runner
        reward = np.where(active, reward, 0.0)
        rewards["taggers"][...] = reward[:, :T]
        rewards["runners"][...] = reward[:, T:]
        np.logical_not(runners_active.any(1), out=terminated)
        return new

    def _tags(self, position: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per tagger the number of runners it tags, per runner whether it is tagged; ``position``
        ``(n, 2, N)`` after the move, ``active`` at the start of the step."""
        T = self.T
        n, R = position.shape[0], self.N - T
        count = np.empty((n, T), np.int64)
        tagged = np.empty((n, R), bool)
        for rows in env_chunks(n, T * R * 24, self.chunk_bytes):
            delta = position[rows, :, None, T:] - position[rows, :, :T, None]  # runner minus tagger
            delta *= delta
            within = delta[:, 0] + delta[:, 1] <= self.tag_distance2
            within &= active[rows, :T, None]
            within &= active[rows, None, T:]
            within.sum(2, out=count[rows])
            within.any(1, out=tagged[rows])
        return count, tagged

    def write_obs(self, state: np.ndarray, out: dict[str, np.ndarray]) -> None:
        c, N, T, M = self.env, self.N, self.T, self.M
        n, W = state.shape[0], c.world_size
        blocks = state[:, : 5 * N].reshape(n, 5, N)  # x, y, speed, heading, active
        position, heading, active = blocks[:, :2], blocks[:, 3], blocks[:, 4]
        # Per agent: its own 7 features, then the 3 others see of it (speed, is_tagger, active).
        features = np.empty((n, N, 10), np.float32)
        features[..., :3] = (blocks[:, :3] / self.scale).transpose(0, 2, 1)  # x/W, y/W, speed/max_speed
        np.cos(heading, out=features[..., 3])
        np.sin(heading, out=features[..., 4])
        features[..., 5] = active
        features[..., 6] = (state[:, 5 * N] / c.max_episode_steps)[:, None]
        features[..., 7] = features[..., 2]
        features[..., 8] = self.is_tagger
        features[..., 9] = active
        seen = features[..., 7:]
        groups = ((out["taggers"], 0, T), (out["runners"], T, N))
        for obs, lo, hi in groups:
            obs[..., :7] = features[:, lo:hi, :7]
        nearest_only = M < N - 1
        far = np.where(active > 0, 0.0, np.inf) if nearest_only else None
        # Pairs against all N agents (self included) by broadcasting, which is cheaper
        # than gathering the N - 1 others; self is dropped afterwards.  All agents at
        # once, then each group's rows are copied out: half the calls of a pass per group.
        for rows in env_chunks(n, N * N * (48 if nearest_only else 40), self.chunk_bytes):
            delta = position[rows, :, None, :] - position[rows, :, :, None]  # (c, 2, N, N): j's minus i's
            if far is not None:  # nearest_only
                square = delta * delta
                d = np.add(square[:, 0], square[:, 1], out=square[:, 0])
                d += far[rows, None, :]
                d[:, self.agents, self.agents] = np.nan  # self: after every other, inactive ones too
                j = nearest(d, M)
                relative = (np.take_along_axis(delta, j[:, None], -1) / W).transpose(0, 2, 3, 1)
                others = seen[np.arange(j.shape[0])[:, None, None] + rows.start, j]
                for obs, lo, hi in groups:
                    view = obs[rows, :, 7:].reshape(-1, hi - lo, M, 5)  # a view: splits the last axis
                    view[..., :2] = relative[:, lo:hi]
                    view[..., 2:] = others[:, lo:hi]
            else:
                # Every agent's view of every agent, self included, laid out as the
                # observations are; then each row's N - 1 others are taken by index.
                pairs = np.empty((delta.shape[0], N, N, 5), np.float32)
                np.divide(delta[:, 0], W, out=pairs[..., 0])
                np.divide(delta[:, 1], W, out=pairs[..., 1])
                pairs[..., 2:] = seen[rows, None]
                pairs = pairs.reshape(-1, N * N, 5)
                for obs, lo, hi in groups:
                    np.take(
                        pairs,
                        self.other_pairs[lo:hi],
                        axis=1,
                        out=obs[rows, :, 7:].reshape(-1, hi - lo, M, 5),
                        mode="clip",
                    )


def nearest(d: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the ``k`` smallest of each row of ``d`` (last axis), ordered by ``(d, column)``;
    NaN counts as larger than everything (as NumPy sorts it).

    Few columns: one stable sort.  Many: ``np.partition`` finds each row's ``k``-th
    smallest value ``v``, and the columns with ``d <= v`` are the answer when there are
    exactly ``k`` of them (in column order, read off by ``nonzero``); rows where values
    equal to ``v`` straddle the cut (inactive others at ``+inf``, hand-made ties) are
    sorted in full.  Then a stable sort of the ``k`` chosen orders them by distance.
    """
    if d.shape[-1] <= SORT_MAX_AGENTS:
        return np.argsort(d, axis=-1, kind="stable")[..., :k]
    kth = np.partition(d, k - 1, axis=-1)[..., k - 1 : k]
    chosen = d <= kth
    ties = np.count_nonzero(chosen, axis=-1) != k
    if ties.any():
        rows = ties.nonzero()
        chosen[rows] = False
        first = np.argsort(d[rows], axis=-1, kind="stable")[:, :k]
        chosen[(*(r[:, None] for r in rows), first)] = True
    cols = chosen.nonzero()[-1].reshape(*d.shape[:-1], k)
    order = np.argsort(np.take_along_axis(d, cols, -1), axis=-1, kind="stable")
    return np.take_along_axis(cols, order, -1)


class Tag(TagBase):
    """Batched Tag (see the module docstring for the rules), groups ``taggers`` and ``runners``.

    ``step({"taggers": (num_envs, T), "runners": (num_envs, R)})`` takes integer
    actions in ``[0, num_acceleration_levels * num_turn_levels)``; observations are
    ``(num_envs, n_group, 7 + 5 M)`` float32 per group, rewards ``(num_envs,
    n_group)``.  Unvalidated torch backends clamp out-of-range actions into range.
    Every constant is a constructor keyword argument, checked by ``TagBase``
    (``msrl.envs.tag._base``, which both backends' physics read).
    """

    physics = {"numpy": NumpyTag, "torch": TorchTag}
    kernel = "tag"


__all__ = ["CHUNK_BYTES", "SORT_MAX_AGENTS", "NumpyTag", "Tag", "TagBase", "env_chunks", "nearest"]
