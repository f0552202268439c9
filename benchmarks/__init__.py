"""msrl's benchmarks: one module per question, run from the repository's root as
``python -m benchmarks.NAME`` (``--help`` for each one's options), over one shared harness
(``harness``: timing, interleaved A/B, machine info, JSONL records, markdown tables).

Training:
    training_speed      How fast does msrl train PPO CartPole, and how soon does it solve it, against
                        SB3 and RLlib on a CPU (``--device cuda``: msrl alone on a GPU)?
    learning_quality    How well does each algorithm learn, against SB3 with rl-zoo's settings?
    cleanrl_speed       How fast does msrl train per env step where CleanRL's script is the peer (C51)?
    offline_learning    How well do IQL, AWAC and CQL learn from msrl's recorded datasets (D4RL's levels
                        and normalised score)?
    marl_learning       How well do MAPPO, IPPO, QMIX, VDN and MADDPG learn simple_spread, and IPPO's
                        taggers Tag?
    algorithm_matrix    Does every algorithm learn under every preset?  (The slow test's table.)
    warpdrive           WarpDrive on the same GPU: the peer of the GPU training, env stepping and
                        Tag rows (its own environment: see its docstring).

Pixels:
    atari_speed         How fast does msrl train PPO and IMPALA on Atari Pong, against SB3, CleanRL,
                        RLlib and Sample Factory (``atari_peers``: the peers' runners), and step it?
    pixel_policy        How far has a pixel policy moved from uniform, and how much of its torso
                        does it use (a checkpoint's entropy, logits and dead features)?

Environments:
    env_stepping        How fast do msrl's environments step, against gymnasium and EnvPool?
    tag_scaling         How does Tag scale with environments and agents?

Distribution:
    plan_accuracy       How well does ``msrl plan``'s cost model predict each preset, and does
                        ``policy: auto`` pick the fastest?
    preset_overhead     What does each distribution policy cost on one machine?
    transport_latency   What does one per-step round trip cost on each transport?
    multihost_scaling   How do the presets scale across hosts on shaped links (and the model's
                        predictions for 8 to 512 hosts, docs/scaling.md)?
    relay_cost          What does the testbed's delay relay cost by itself?

The learner:
    step_latency        What does the compiled step cost per call, against eager?
    deferred_diagnostics  What is deferring PPO's diagnostics worth?

Changes:
    ab                  Is checkout B faster than checkout A (any command above, or one config's
                        training time)?

Recorded data and its figures are in ``figures/``, each file named for what it holds.  The
learning gate, which CI runs, is msrl's own: ``python -m msrl.app.gate``.
"""
