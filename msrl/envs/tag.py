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
the game).  The environment also counts its steps ``t``.

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
max_acceleration]`` and ``[min_turn, max_turn]`` (radians).

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
of the step is *tagged* when some tagger lies within ``tagging_distance``
(Euclidean, ``<=``).  A tagged runner's reward gets ``tag_penalty_for_runner``;
every tagger gets ``tag_reward_for_tagger`` for each runner it is within
``tagging_distance`` of that is tagged in this step.  With
``runner_exits_game_after_tagged`` a tagged runner becomes inactive (stays where
it is); otherwise it stays in the game and can be tagged again.

Then ``t += 1``.  When ``t == max_episode_steps`` every runner still active gets
``end_of_game_reward_for_runner``.  The episode *terminates* when no runner is
active (only possible when runners exit) and is *truncated* at
``max_episode_steps`` (``BatchedEnv``'s time limit); either way it restarts in the
same step.

Observations (the same layout for both groups)
-----------------------------------------------
Agent ``i`` sees its own features ``[x/W, y/W, speed/max_speed_i, cos(heading),
sin(heading), active, t/max_episode_steps]`` (``W = world_size``; 7 numbers), then
for each of ``M`` other agents ``j`` ``[(x_j - x_i)/W, (y_j - y_i)/W,
speed_j/max_speed_j, is_tagger_j, active_j]`` (5 numbers each): ``7 + 5 M`` in
all.  With ``num_observed = 0`` (or ``>= N - 1``) ``M = N - 1`` and the others are
all agents ``j != i`` in index order.  With ``0 < num_observed < N - 1``, ``M =
num_observed`` and the others are the ``M`` nearest by the key ``(d_ij, j)``
(lexicographic; ``d_ij`` the squared distance, ``+inf`` for an inactive ``j``),
in increasing key order.  ``t`` is the count after the step (an environment that
just finished shows its next episode's first observation, ``t = 0``).

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
"""
