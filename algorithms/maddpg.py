"""MADDPG (Lowe et al., 2017) for discrete actions: decentralised policies trained through
centralised critics, with Gumbel-softmax making the policies' discrete actions differentiable.

Every agent acts on one policy network shared by all agents (its input the agent's observation and
one-hot index; a GRU with ``recurrent``), sampling its action from the policy's logits by the
Gumbel-max trick.  Whole episodes go into an episode replay (``msrl.rl.EpisodeReplay``, QMIX's).
The critic, one network for every agent (its input the global state, every agent's one-hot action
and the agent's index), regresses each agent's value of the joint action taken on ``r + gamma *
Q'(s', a')``, ``a'`` every agent's greedy action under the target policy; the policy follows each
agent's critic through its own straight-through Gumbel-softmax action (the others' held fixed),
with the logits' squares penalised by ``reg``.  EPyMARL's settings (``algs/maddpg.yaml``): Adam at
5e-4 for both, batches of 32 episodes from 50,000, the targets copied every 200 updates,
standardised rewards, ``reg`` 1e-3, 128 hidden units and a GRU, gradients clipped to 10; its
episode-per-update schedule as QMIX's config runs it (``num_envs`` episodes, as many updates).

Read top to bottom: config, networks, components, algorithm.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

import msrl.envs
from algorithms.qmix import AgentQ, EpisodeConfig, QMIXActor, multi_agent_layout, standardised, unroll
from msrl.core import Algorithm, Batched, ConfigError, Global, Learner, RunInfo, split, steps
from msrl.rl import (
    EpisodeBatch,
    EpisodeReplay,
    GradientStep,
    RunningMeanStd,
    copy_weights,
    keeps_final_obs,
    load_state,
    mlp,
    one_hot,
    region_key,
    save_state,
)


@dataclass
class MADDPGConfig(EpisodeConfig):
    buffer_size: int = split(50_000)
    """Replay capacity in episodes, over the whole run."""
    hidden_size: int = 128
    """Width of the policy (and its GRU) and of the critic."""
    reg: float = 1e-3
    """Weight of the policy logits' mean square in the policy's loss."""

    def validate(self) -> None:
        super().validate()
        if self.reg < 0:
            raise ConfigError(f"algo.reg must be >= 0, got {self.reg}")


def gumbel_softmax(logits: Tensor, gumbel: Tensor) -> Tensor:
    """The one-hot of ``argmax(logits + gumbel)`` in the forward pass, the gradient of
    ``softmax(logits + gumbel)`` in the backward one (the straight-through estimator)."""
    soft = torch.softmax(logits + gumbel, dim=-1)
    hard = one_hot(soft.argmax(-1), soft.shape[-1], soft.dtype)
    return hard - soft.detach() + soft


def own_action_joint(actions: Tensor) -> Tensor:
    """What each agent's critic sees of the joint action in the policy's loss: every agent's action
    ``(..., agents, actions)`` side by side, ``(..., agents, agents * actions)``, where in row ``i``
    only agent ``i``'s own action carries a gradient (the others' are held fixed)."""
    agents = actions.shape[-2]
    fixed = actions.detach()
    own = torch.eye(agents, dtype=actions.dtype, device=actions.device).unsqueeze(-1)  # (agents, agents, 1)
    return (fixed.unsqueeze(-3) + own * (actions - fixed).unsqueeze(-3)).flatten(-2)


def gumbel(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> Tensor:
    """Standard Gumbel noise, ``-log(-log(U))``."""
    uniform = torch.rand(shape, generator=generator, device=device).clamp(1e-10, 1.0 - 1e-7)
    return -torch.log(-torch.log(uniform))


# -- components ------------------------------------------------------------------------------------
class MADDPGActor(QMIXActor):
    """Every agent's action drawn from the shared policy's logits (the Gumbel-max trick is a
    categorical draw); ``greedy`` takes the most likely one.  Memories as QMIX's actor keeps them."""

    @torch.inference_mode()
    def act(self, obs: Any) -> Batched:
        obs = self._obs(obs)
        logits, self.memory = self._q(obs, self.memory)
        self.env_steps += obs.shape[0]
        return self._split((logits + gumbel(tuple(logits.shape), self.generator, self.device)).argmax(-1))


class MADDPGLearner(Learner):
    """The critic's TD step on the target policy's next actions, then the policy's step through
    each agent's critic."""

    def __init__(
        self, net: AgentQ, agents: int, obs_dim: int, actions: int, config: MADDPGConfig, run: RunInfo
    ) -> None:
        self.config = config
        self.device = torch.device(run.device)
        self.agents, self.actions = agents, actions
        generator = torch.Generator().manual_seed(run.seed_for("weights", 1))  # the critic's: after the policy's
        self.policy = net.to(self.device)
        critic_inputs = agents * obs_dim + agents * actions + agents
        self.critic = mlp([critic_inputs, config.hidden_size, config.hidden_size, 1], nn.ReLU, generator)
        self.critic = self.critic.to(self.device)
        self.target = nn.ModuleDict({"policy": self.policy, "critic": self.critic})
        self.target = copy.deepcopy(self.target).requires_grad_(False)
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=config.learning_rate)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=config.learning_rate)
        self.generator = run.rng("learner")  # the policy loss's Gumbel noise
        self.rewards = RunningMeanStd(device=self.device)
        self.updates = 0
        option, key, clip = config.compile, region_key(config), config.max_grad_norm
        self.critic_step = GradientStep(
            self.critic, self.critic_optimizer, self.critic_loss, clip, option, (self.target,), key=key
        )
        self.policy_step = GradientStep(
            self.policy, self.policy_optimizer, self.policy_loss, clip, option, (self.critic,), key=key
        )

    def learn(self, batch: EpisodeBatch) -> Global:
        if batch.rewards.shape[0] == 0:
            return {}  # warm-up: too few episodes yet
        batch = EpisodeBatch(*(field.to(self.device) for field in batch))
        rewards = standardised(self.rewards, batch) if self.config.standardise_rewards else batch.rewards
        totals = torch.zeros(2, dtype=torch.float64, device=self.device)
        sync = self.gradient_sync
        for k in range(batch.num_batches):
            episodes = batch.minibatch(k)
            critic_loss = self.critic_step(
                episodes.obs, episodes.actions, rewards[:, k], episodes.terminated, episodes.mask, sync=sync
            )
            noise = gumbel(tuple(episodes.actions.shape) + (self.actions,), self.generator, self.device)
            policy_loss = self.policy_step(episodes.obs, episodes.mask, noise, sync=sync)
            totals = totals + torch.cat([critic_loss, policy_loss]).double()
            self.updates += 1
            if self.updates % self.config.target_update_interval == 0:
                self.target.load_state_dict(self._live())
        critic, policy = (totals / batch.num_batches).tolist()
        return {"q_loss": critic, "policy_loss": policy}

    def _live(self) -> dict[str, Tensor]:
        """The online networks' weights, keyed as the targets'."""
        return {f"policy.{k}": v for k, v in self.policy.state_dict().items()} | {
            f"critic.{k}": v for k, v in self.critic.state_dict().items()
        }

    def values(self, critic: nn.Module, state: Tensor, joint: Tensor) -> Tensor:
        """Each agent's value of a joint action: ``state`` ``(..., state_dim)``, ``joint`` ``(...,
        agents, agents * actions)`` (what each agent's critic sees of the actions) -> ``(..., agents)``."""
        lead = joint.shape[:-2]
        ids = torch.eye(self.agents, device=state.device).expand(*lead, self.agents, self.agents)
        states = state.unsqueeze(-2).expand(*lead, self.agents, state.shape[-1])
        return critic(torch.cat((states, joint, ids), -1)).squeeze(-1)

    def logits(self, net: AgentQ, obs: Tensor) -> Tensor:
        """The policy's logits over every step of every episode: ``(B, T + 1, agents, actions)``."""
        return unroll(net, obs)

    def critic_loss(
        self, obs: Tensor, actions: Tensor, rewards: Tensor, terminated: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Every agent's squared TD error on the steps of the episodes, and it (detached)."""
        state = obs.flatten(2)
        joint = one_hot(actions, self.actions).flatten(2)  # (B, T, agents * actions)
        taken = self.values(self.critic, state[:, :-1], joint.unsqueeze(-2).expand(-1, -1, self.agents, -1))
        with torch.no_grad():
            target_net = cast(AgentQ, self.target["policy"])
            greedy = self.logits(target_net, obs)[:, 1:].argmax(-1)
            next_joint = one_hot(greedy, self.actions).flatten(2)
            next_joint = next_joint.unsqueeze(-2).expand(-1, -1, self.agents, -1)
            next_values = self.values(self.target["critic"], state[:, 1:], next_joint)
            target = rewards.unsqueeze(-1) + self.config.gamma * (1.0 - terminated.unsqueeze(-1)) * next_values
        weights = mask.unsqueeze(-1).expand_as(taken)
        loss = ((taken - target).square() * weights).sum() / weights.sum().clamp_min(1.0)
        return loss, loss.detach().unsqueeze(0)

    def policy_loss(self, obs: Tensor, mask: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
        """Minus each agent's critic value of the joint action where only its own (straight-through
        Gumbel-softmax) action carries a gradient, plus ``reg`` times the logits' mean square."""
        logits = self.logits(self.policy, obs)[:, :-1]
        joint = own_action_joint(gumbel_softmax(logits, noise))
        values = self.values(self.critic, obs.flatten(2)[:, :-1], joint)
        weights = mask.unsqueeze(-1).expand_as(values)
        loss = -(values * weights).sum() / weights.sum().clamp_min(1.0) + self.config.reg * logits.square().mean()
        return loss, loss.detach().unsqueeze(0)

    def get_weights(self) -> Global:
        return copy_weights(self.policy)

    _STATE = ("policy", "critic", "target", "policy_optimizer", "critic_optimizer", "generator", "updates", "rewards")

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, *self._STATE)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, *self._STATE)


# -- algorithm ---------------------------------------------------------------------------------------
class MADDPG(Algorithm):
    """MADDPG: episodes of Gumbel-sampling agents, centralised critics, decentralised policies."""

    name = "maddpg"
    Config = MADDPGConfig

    def __init__(self, config: MADDPGConfig, run: RunInfo | None = None) -> None:
        super().__init__(config, run)
        run = self.run
        layout = multi_agent_layout(self.name, config.env_id, config.env_kwargs)

        def make_net() -> AgentQ:
            generator = torch.Generator().manual_seed(run.seed_for("weights"))
            inputs = layout.obs_dim + layout.agents
            return AgentQ(inputs, layout.actions, config.hidden_size, config.recurrent, generator)

        self.env = msrl.envs.make(
            config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults, **config.env_kwargs
        )
        self.final_obs = keeps_final_obs(self.env, config.bootstrap_time_limits)  # a constant of the graph
        self.actor = MADDPGActor(make_net(), layout.sizes, layout.actions, run)
        self.buffer = EpisodeReplay(
            config.buffer_size,
            config.episode_length,
            config.num_envs,
            list(layout.sizes),
            layout.agents,
            layout.obs_dim,
            batch_size=config.batch_size,
            num_batches=config.gradient_steps,
            seed=run.seed_for("replay"),
            device=run.device,
            final_obs=self.final_obs,
        )
        self.learner = MADDPGLearner(make_net(), layout.agents, layout.obs_dim, layout.actions, config, run)

    def train_step(self) -> dict:
        # Episodes: every environment plays episode_length steps, each step into the episode replay.
        obs = self.env.observe()
        for _ in steps(self.config.episode_length):
            actions = self.actor.act(obs)
            next_obs, rewards, terminated, truncated = self.env.step(actions)
            last = self.env.final_obs() if self.final_obs else next_obs  # the episodes' last observations
            self.buffer.insert(obs, actions, rewards, last, terminated, truncated)
            self.actor.forget(terminated, truncated)
            obs = next_obs
        # Replay: a batch of whole episodes (none during the warm-up).
        batch = self.buffer.sample()
        # Update: the critic, then the policy through it.
        metrics = self.learner.learn(batch)
        # Sync: the agents act with the new policy from the next iteration on.
        self.actor.set_weights(self.learner.get_weights())
        return metrics
