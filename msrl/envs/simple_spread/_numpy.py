"""MPE ``simple_spread_v3``: N agents cover N landmarks without colliding, batched.

The maintained Multi-Agent Particle Environments (``mpe2``, Farama; matched
against ``mpe2`` 1.1.1 with ``pettingzoo`` 1.27.0) step one Python object per
agent, about 2,000 steps a second.  ``SimpleSpread`` steps ``num_envs`` copies
at once as NumPy (float64 state, like ``mpe2``) or torch arrays (any device,
float32 or float64), vectorised over environments and agents, and reproduces
``mpe2``'s ``parallel_env`` step for step: given the same state and actions,
the NumPy backend's observations, rewards and truncation equal ``mpe2``'s to
the last bit (the arithmetic below is ``mpe2``'s, in its order).  The rules
below are complete; ``NumpySimpleSpread`` here and ``TorchSimpleSpread``
(``msrl.envs.simple_spread._torch``) implement them.

Agents, landmarks and the state
-------------------------------
One group ``agents`` of ``N`` agents (``mpe2``'s ``agent_0 .. agent_{N-1}``) and
``N`` fixed landmarks on a plane.  Agent ``i`` has a position ``p_i`` and a
velocity ``v_i``; landmark ``k`` a position ``l_k``.  Agents are discs of radius
``size = 0.15``; landmarks do not collide.  Agents are silent (their
communication state is always zero).

State row (``state_dim = 6 N``, float64 on NumPy): ``p_0x, p_0y, ..., p_{N-1}y``,
then ``v`` in the same layout, then ``l``.

Reset: every ``p_i`` uniform in ``[-1, 1)^2``, every ``l_k`` in ``landmark_range
[-1, 1)^2`` (``landmark_range`` 1 in ``mpe2``), ``v_i = 0``.  (Each
backend draws from its own generator: resets agree with ``mpe2`` in
distribution, steps agree exactly.)

Actions
-------
``Discrete(5)`` per agent (``mpe2``'s default): 0 no move, 1 left, 2 right, 3
down, 4 up, i.e. ``u_i = 5 * (0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)``.  With
``continuous_actions=True``: ``Box(0, 1, (5,))`` float32 per agent, clipped to
``[0, 1]`` (``mpe2``'s ``ClipOutOfBoundsWrapper``), ``u_i = 5 * (a_2 - a_1, a_4 -
a_3)``, the differences taken in the action's dtype (float32 from a policy, as
in ``mpe2``).

A step
------
1. Contact forces, on the positions before the move: for every pair ``i != j``,
   ``d = p_i - p_j``, ``r = sqrt(d_x d_x + d_y d_y)``, ``pen = logaddexp(0,
   -(r - 2 size) / k) k`` with ``k = 1e-3``, and agent ``i`` is pushed by ``f_ij =
   100 d / r * pen`` (evaluated left to right; ``f_ji = -f_ij``).
2. ``F_i = u_i + f_i0 + f_i1 + ...`` summed in that order, over ``j != i``
   (``mpe2`` visits pairs ``(a, b)``, ``a < b``, in order; negation is exact).
3. ``p_i += v_i dt``, then ``v_i = v_i (1 - damping) + F_i dt`` with ``dt = 0.1``,
   ``damping = 0.25`` (mass 1, no speed limit, no noise): ``mpe2``'s explicit Euler
   step, in which an action first moves its agent one step later.  With
   ``integrator="semi-implicit"`` the velocity is updated first and the position
   moves with the new one (``p_i += v_i dt`` after it), as the original MPE and the
   MAPPO paper's fork do.
4. Rewards, on the new positions: the global reward ``g = -(m_0 + m_1 + ... +
   m_{N-1})`` (summed in landmark order), ``m_k`` the distance from landmark ``k``
   to its nearest agent; agent ``i``'s local reward is ``-c_i``, ``c_i`` the number
   of agents ``j != i`` closer than ``2 size`` (``r < 0.3``).  Agent ``i`` gets
   ``g (1 - local_ratio) + (-c_i) local_ratio``, computed in float64 and rounded
   once to float32.  With ``shared_reward=True`` every agent gets the MAPPO
   fork's shared reward instead, the sum over agents of ``g - 1 - c_i`` (its
   collision loop counts the agent's own disc: the 1), i.e. ``N g - N - (c_0 +
   ... + c_{N-1})``; ``local_ratio`` is then unused.

The episode never terminates; it is truncated at its ``max_cycles``-th step
(``BatchedEnv``'s time limit, ``mpe2``'s ``steps >= max_cycles``) and restarts in
the same step.

Observations
------------
Agent ``i`` sees ``[v_i, p_i, l_0 - p_i, ..., l_{N-1} - p_i, p_j - p_i for j != i
in index order, 2 (N - 1) zeros]`` (the last are the other agents' silent
communication): ``6 N`` numbers (18 for N = 3), computed in the state's dtype and
rounded once to float32.  The observation of a finished environment is the
first of its next episode; ``mpe2``'s last observation of an episode is not
returned.

Constructor keyword arguments (``mpe2``'s names and defaults): ``N`` [3],
``local_ratio`` [0.5], ``max_cycles`` [25], ``continuous_actions`` [False]; and
the three rules in which the MAPPO paper's MPE fork (marlbenchmark/on-policy,
``onpolicy/envs/mpe``) differs from ``mpe2``, off by default: ``landmark_range``
[1.0; the fork's 0.8], ``shared_reward`` [False; the fork's True] and
``integrator`` ["explicit"; the fork's "semi-implicit"].  With all three set the
per-agent return is the fork's, the figure its code logs (its discrete actions
map indices to directions in another order, which no policy sees).
``mpe2``'s curriculum, ``terminate_on_success`` and partial observability
(``num_*_neighbors``) are not implemented; the ``pettingzoo`` backend
(``msrl.envs.make("simple_spread_v3", n, backend="pettingzoo", ...)``) runs
``mpe2`` itself with any of its arguments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from msrl.envs._base import Physics
from msrl.envs.simple_spread._base import SimpleSpreadBase
from msrl.envs.simple_spread._torch import TorchSimpleSpread


class NumpySimpleSpread(Physics[SimpleSpreadBase]):
    """``mpe2``'s arithmetic over all environments at once.

    The arrays are laid out agent-major and environment-minor, ``(N, 2, num_envs)``
    (``state.T`` viewed by coordinate), so every NumPy loop runs over the
    environments: with ``(num_envs, N, 2)`` the innermost loops are two numbers
    long, and a step at 1000 environments took three times as long.  ``step``
    returns the new state in Fortran order for the same reason; it is still
    ``(num_envs, state_dim)``.
    Pairwise terms are computed once per pair ``a < b``, as ``mpe2`` does.
    """

    def __init__(self, env: SimpleSpreadBase, rng: Any) -> None:
        super().__init__(env, rng)
        n = env.N
        first, second = np.triu_indices(n, 1)
        self._pairs = (first, second)
        # agent i's partners j != i in increasing order: the pair index and the sign of its force on i
        partners = [[j for j in range(n) if j != i] for i in range(n)]
        pair_index = {(int(a), int(b)): p for p, (a, b) in enumerate(zip(first, second))}
        self._pair_of = np.array(
            [[pair_index[min(i, j), max(i, j)] for j in js] for i, js in enumerate(partners)], dtype=np.intp
        ).reshape(n, n - 1)
        self._sign = np.array([[1.0 if i < j else -1.0 for j in js] for i, js in enumerate(partners)]).reshape(
            n, n - 1, 1, 1
        )
        self._others = np.array(partners, dtype=np.intp).reshape(n, n - 1)
        self._incidence = np.zeros((n, len(first)))  # agent x pair: 1 where the agent is in the pair
        self._incidence[first, np.arange(len(first))] = 1.0
        self._incidence[second, np.arange(len(first))] = 1.0
        self._moves = np.array(env.moves, dtype=np.float64) * env.sensitivity

    def draw_reset(self, n: int) -> np.ndarray:
        c = self.env
        fresh = np.zeros((n, 3, c.N, 2))
        fresh[:, 0] = self.rng.uniform(-1.0, 1.0, size=(n, c.N, 2))
        fresh[:, 2] = self.rng.uniform(-1.0, 1.0, size=(n, c.N, 2)) * c.landmark_range
        return fresh.reshape(n, c.state_dim)

    def _planes(self, state: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positions, velocities and landmarks as ``(N, 2, num_envs)`` views of ``state``."""
        n, planes = self.env.N, state.T
        shape = (n, 2, state.shape[0])
        return planes[: 2 * n].reshape(shape), planes[2 * n : 4 * n].reshape(shape), planes[4 * n :].reshape(shape)

    def write_obs(self, state: np.ndarray, out: dict[str, np.ndarray]) -> None:
        n = self.env.N
        pos, vel, landmarks = self._planes(state)
        obs = out["agents"].transpose(1, 2, 0)  # (N, 6 N, num_envs), a view of the output
        obs[:, 0:2] = vel
        obs[:, 2:4] = pos
        end = 4 + 2 * n
        for xy in (0, 1):
            obs[:, 4 + xy : end : 2] = landmarks[None, :, xy] - pos[:, None, xy]
            obs[:, end + xy : end + 2 * (n - 1) : 2] = pos[self._others, xy] - pos[:, None, xy]
        obs[:, end + 2 * (n - 1) :] = 0.0  # the silent agents' communication

    def _pair_distances(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(p_a - p_b, |p_a - p_b|)`` for every pair ``a < b``: ``(P, 2, E)`` and ``(P, E)``."""
        delta = pos[self._pairs[0]] - pos[self._pairs[1]]
        dx, dy = delta[:, 0], delta[:, 1]
        return delta, np.sqrt(dx * dx + dy * dy)

    def step(
        self, state: np.ndarray, actions: dict[str, np.ndarray], rewards: dict[str, np.ndarray], terminated: np.ndarray
    ) -> np.ndarray:
        c = self.env
        num, n = state.shape[0], c.N
        pos, vel, landmarks = self._planes(state)
        action = actions["agents"].T
        if c.continuous_actions:
            a = np.clip(action, 0.0, 1.0)  # (5, N, E)
            force = np.stack((a[2] - a[1], a[4] - a[3]), 1).astype(np.float64) * c.sensitivity
        else:
            force = self._moves[action.astype(np.intp, copy=False)].transpose(0, 2, 1)

        delta, dist = self._pair_distances(pos)
        penetration = np.logaddexp(0.0, -(dist - c.dist_min) / c.contact_margin) * c.contact_margin
        pair = c.contact_force * delta / dist[:, None] * penetration[:, None]  # on a; -pair on b
        signed = pair[self._pair_of] * self._sign  # (N, N - 1, 2, E), partners in increasing order
        for k in range(n - 1):
            force = force + signed[:, k]

        new = np.empty((c.state_dim, num))
        new_pos, new_vel = new[: 2 * n].reshape(n, 2, num), new[2 * n : 4 * n].reshape(n, 2, num)
        np.add(vel * (1 - c.damping), force * c.dt, out=new_vel)
        np.add(pos, (new_vel if c.velocity_first else vel) * c.dt, out=new_pos)
        new[4 * n :] = state.T[4 * n :]

        collisions = self._incidence @ (self._pair_distances(new_pos)[1] < c.dist_min)  # (N, E)
        to_landmarks = new_pos[:, None] - landmarks[None]  # [agent, landmark, xy, E]
        dx, dy = to_landmarks[:, :, 0], to_landmarks[:, :, 1]
        nearest = np.sqrt(dx * dx + dy * dy).min(axis=0)  # (landmark, E)
        coverage = np.zeros(num)
        for k in range(n):
            coverage -= nearest[k]
        if c.shared_reward:
            rewards["agents"][...] = (coverage * n - n - collisions.sum(0))[:, None]
        else:
            rewards["agents"][...] = (coverage * (1 - c.local_ratio) + (-collisions) * c.local_ratio).T
        terminated.fill(0.0)  # simple_spread never terminates, only truncates
        return new.T


class SimpleSpread(SimpleSpreadBase):
    """Batched ``simple_spread_v3`` (see the module docstring for the rules).

    ``step({"agents": actions})`` takes ``(num_envs, N)`` indices in ``[0, 5)`` (or
    ``(num_envs, N, 5)`` floats with ``continuous_actions``) and returns ``({"agents":
    obs}, {"agents": rewards}, terminated, truncated)``, ``obs`` of shape ``(num_envs,
    N, 6 N)``, rewards ``(num_envs, N)``.  Unvalidated torch clamps discrete actions
    into ``[0, 4]``.

    Example::

        >>> env = SimpleSpread(num_envs=2, seed=0)
        >>> obs, rewards, terminated, truncated = env.step({"agents": np.zeros((2, 3), np.int64)})
        >>> obs["agents"].shape, rewards["agents"].shape
        ((2, 3, 18), (2, 3))
    """

    physics = {"numpy": NumpySimpleSpread, "torch": TorchSimpleSpread}


__all__ = ["NumpySimpleSpread", "SimpleSpread", "SimpleSpreadBase"]
