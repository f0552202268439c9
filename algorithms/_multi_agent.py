"""MAPPO's and IPPO's components (``algorithms.mappo`` holds the config and the algorithms): the
rollout buffer with active masks and the learner here, the policies in ``algorithms._agents``, the
actors in ``algorithms._multi_agent_actors``.

* **Value normalisation** (the MAPPO paper's ``ValueNorm``, ``msrl.rl.ValueNorm``): with
  ``value_norm`` each policy's critic predicts value targets standardised by running statistics of
  the targets.  The statistics are buffers of the policies' module, so they travel to the actors
  with the weights and into checkpoints with them; the actor denormalises what the critic says
  before GAE sees it.  The learner folds each batch's returns in before it learns from them,
  averaged over learner copies (``Learner.sync_mean``): every copy normalises alike.
* **Active masks**: an environment may say which agents are still in the game with an
  ``active() -> {group: (num_envs, agents)}`` method (1 in the game, 0 out of it: a tagged runner
  that left, a PettingZoo agent removed before the episode ended), for the latest observation.
  A step an agent takes while out of the game leaves every loss, advantage normalisation and the
  value statistics, and the step on which it leaves ends its episode in GAE (terminal for it alone;
  the others play on).  Environments without ``active()`` keep every agent in the game.
* **Recurrent policies** (rMAPPO, ``recurrent``): the buffer keeps what every agent remembered
  before each step and where episodes began, and hands them over in (environment, step) order; the
  learner replays each environment's rollout through the GRUs (``Agents.unroll``), restarting from
  the stored memory every ``chunk_length`` steps, and draws minibatches of whole environments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
import torch.nn.functional as F  # noqa: N812

from algorithms._agents import Agents
from algorithms._multi_agent_actors import MultiAgentActor, RecurrentMultiAgentActor
from msrl.core import AgentGroup, Batched, Buffer, ConfigError, Global, Learner, NoValue, RunInfo, deferred
from msrl.rl import (
    GROUP_SEPARATOR,
    GradientStep,
    ValueNorm,
    action_layout,
    clipped_surrogate,
    copy_weights,
    gae,
    linear_lr,
    load_state,
    observation_shape,
    ppo_epochs,
    region_key,
    save_state,
)

__all__ = ["Agents", "MAPPOLearner", "MultiAgentActor", "MultiAgentBuffer", "RecurrentMultiAgentActor"]

FIELDS = ("obs", "actions", "logprobs", "values", "advantages", "returns", "active")
"""What the buffer hands the learner per group, as ``"group/field"`` keys of one flat mapping."""
RECURRENT_FIELDS = ("memory", "first")
"""What it hands a recurrent learner besides: the agents' memories before each step and whether an
episode began there (per agent, 1 or 0)."""


# -- components ----------------------------------------------------------------------------------------
class MultiAgentBuffer(Buffer):
    """``num_steps`` steps of ``num_envs`` environments of every group's agents.  ``drain`` runs GAE
    per agent and returns ``"group/field" -> (rows, agents, ...)`` tensors (``FIELDS``, rows =
    (step, env)).  ``insert`` takes what the environment said per step, and with active masks the
    agents in the game before the step (``active``) and after it (``next_active``): an agent in the
    game before and out after, in an environment that goes on, ended its own episode there.  With
    ``bootstrap_time_limits`` off an episode cut off by its time limit ends as a terminal state would
    (the MAPPO paper's runs: its ``use_proper_time_limits`` is off)."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        groups: Mapping[str, AgentGroup],
        gamma: float,
        gae_lambda: float,
        device: str,
        bootstrap_time_limits: bool = True,
        memory_size: int = 0,
    ) -> None:
        self.num_steps, self.num_envs, self.gamma, self.gae_lambda = num_steps, num_envs, gamma, gae_lambda
        self.bootstrap_time_limits, self.recurrent = bootstrap_time_limits, memory_size > 0
        self.position = 0
        self.tracks: dict[str, dict[str, torch.Tensor]] = {}
        for name, group in groups.items():
            lead = (num_steps, num_envs, group.num_agents)
            action_shape, action_dtype = action_layout(group.action_space)
            obs_shape = observation_shape(f"group {name!r}", group.observation_space)
            track = {key: torch.zeros(lead, device=device) for key in ("logprobs", "values", "rewards", "left")}
            track["obs"] = torch.zeros(lead + tuple(obs_shape), device=device)
            track["actions"] = torch.zeros(lead + tuple(action_shape), dtype=action_dtype, device=device)
            track["active"] = torch.ones(lead, device=device)
            if self.recurrent:
                track["memory"] = torch.zeros(lead + (2, memory_size), device=device)
            self.tracks[name] = track
        self.terminated = torch.zeros((num_steps, num_envs), device=device)
        self.truncated = torch.zeros((num_steps, num_envs), device=device)
        self.first = torch.zeros((num_steps, num_envs), device=device)
        self.begins = torch.ones(num_envs, device=device)  # an episode begins at the next step

    def insert(
        self,
        obs: Any,
        actions: Any,
        logprobs: Any,
        values: Any,
        rewards: Any,
        terminated: Any,
        truncated: Any,
        active: Any = None,
        next_active: Any = None,
        memory: Any = None,
    ) -> NoValue:
        t = self.position
        if t >= self.num_steps:
            raise RuntimeError(f"rollout buffer is full ({self.num_steps} steps); drain it first")
        self.terminated[t] = torch.as_tensor(terminated)
        self.truncated[t] = torch.as_tensor(truncated)
        goes_on = 1.0 - torch.maximum(self.terminated[t], self.truncated[t])
        if self.recurrent:  # where episodes begin: only a recurrent learner replays from them
            self.first[t] = self.begins
            self.begins = 1.0 - goes_on
        for name, track in self.tracks.items():
            for key, value in (("obs", obs), ("actions", actions), ("logprobs", logprobs), ("values", values)):
                track[key][t] = torch.as_tensor(value[name])
            track["rewards"][t] = torch.as_tensor(rewards[name])
            if self.recurrent:
                track["memory"][t] = torch.as_tensor(memory[name])
            if active is not None:
                now, after = torch.as_tensor(active[name]), torch.as_tensor(next_active[name])
                track["active"][t] = now
                track["left"][t] = now * (1.0 - after) * goes_on[:, None]
        self.position = t + 1

    def drain(self, last_value: Any) -> Batched:
        if self.position != self.num_steps:
            raise RuntimeError(f"rollout buffer holds {self.position} of {self.num_steps} steps")
        self.position = 0
        out: dict[str, torch.Tensor] = {}
        terminated, truncated = self.terminated, self.truncated
        if not self.bootstrap_time_limits:  # a time limit ends the episode like a terminal state
            terminated, truncated = torch.maximum(terminated, truncated), torch.zeros_like(truncated)
        for name, track in self.tracks.items():
            shape = track["rewards"].shape
            ended = torch.maximum(terminated[..., None].expand(shape), track["left"])
            advantages, returns = gae(
                track["rewards"],
                track["values"],
                ended,
                truncated[..., None].expand(shape),
                torch.as_tensor(last_value[name]),
                self.gamma,
                self.gae_lambda,
            )
            fields = {k: track[k] for k in ("obs", "actions", "logprobs", "values", "active")}
            fields.update(advantages=advantages, returns=returns)
            if self.recurrent:
                fields.update(memory=track["memory"], first=self.first[..., None].expand(shape))
                fields = {k: v.transpose(0, 1) for k, v in fields.items()}  # each environment's steps in order
            for key in FIELDS + (RECURRENT_FIELDS if self.recurrent else ()):  # (step, env) or (env, step) -> rows
                out[f"{name}{GROUP_SEPARATOR}{key}"] = fields[key].reshape((-1,) + fields[key].shape[2:]).clone()
            track["active"].fill_(1.0)
            track["left"].zero_()
        return out

    def state_dict(self) -> dict[str, Any]:
        # checkpoints are taken between iterations, the buffer empty
        return {"position": self.position, "begins": self.begins.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state.get("position", 0))
        if "begins" in state:
            self.begins = torch.as_tensor(state["begins"], device=self.begins.device).clone()


def split_groups(flat: Mapping[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """``"group/field" -> tensor`` as ``{group: {field: tensor}}``, groups in the order they came."""
    groups: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in flat.items():
        group, _, field = key.rpartition(GROUP_SEPARATOR)
        groups.setdefault(group, {})[field] = tensor
    return groups


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def normalize_masked(advantages: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Advantages standardised over the samples in the game (the others set to 0)."""
    count = mask.sum().clamp(min=1.0)
    mean = (advantages * mask).sum() / count
    var = ((advantages - mean).square() * mask).sum() / (count - 1.0).clamp(min=1.0)
    return (advantages - mean) / (var.sqrt() + eps) * mask


class MAPPOLearner(Learner):
    """The clipped-surrogate PPO update of every policy at once: one loss, the mean over the agent
    samples in the game of all groups, one Adam optimiser; the policies' and the critics' gradients
    each clipped to ``max_grad_norm``.  The value loss is the paper's: Huber (``huber_delta``) on
    the (normalised) targets, clipped around the rollout's values when ``clip_value_loss``."""

    def __init__(self, agents: Agents, config: Any, run: RunInfo) -> None:
        self.config = config
        self.device = torch.device(run.device)
        self.agents = agents.to(self.device)
        self.params = list(self.agents.parameters())
        self.actor_params, self.critic_params = self.agents.parameter_groups()
        self.optimizer = torch.optim.Adam(self.params, lr=config.learning_rate, eps=1e-5)
        # The policies' and the critics' gradients each clipped on their own.  A recurrent replay's
        # stretches between restarts depend on the data (where episodes begin), so it runs eagerly.
        option = "false" if self.agents.recurrent else config.compile
        groups = (self.actor_params, self.critic_params)
        self.gradient_step = GradientStep(
            self.agents,
            self.optimizer,
            self.loss,
            config.max_grad_norm,
            option,
            clip_groups=groups,
            key=region_key(config),
        )
        self.generator = run.rng("learner")  # minibatch order, drawn where the data is
        self.num_updates = run.num_updates(config.rows)
        self.updates = 0

    def learn(self, batch: dict[str, torch.Tensor]) -> Global:
        cfg = self.config
        data = {key: t.to(self.device) for key, t in batch.items()}
        if cfg.anneal_lr:
            self.optimizer.param_groups[0]["lr"] = linear_lr(cfg.learning_rate, self.updates, self.num_updates)
        self.updates += 1
        rows = next(iter(data.values())).shape[0]
        if self.agents.recurrent:  # (env, step) rows -> (env, step): minibatches of whole environments
            data = {key: t.reshape((rows // cfg.num_steps, cfg.num_steps) + t.shape[1:]) for key, t in data.items()}
            rows //= cfg.num_steps
        if rows % cfg.num_minibatches:
            unit = "environments" if self.agents.recurrent else "rows"
            raise ConfigError(
                f"algo.num_minibatches ({cfg.num_minibatches}) must divide the {unit} each learner "
                f"learns from ({rows}{'' if self.agents.recurrent else ' = its num_envs x num_steps'})"
            )
        self.fold_in_returns(data)
        for minibatch in ppo_epochs(data, cfg.update_epochs, cfg.num_minibatches, self.generator):
            self.gradient_step(minibatch, sync=self.gradient_sync)
        return deferred(self.diagnostics, data)

    def loss(self, minibatch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The minibatch loss minimised (``"group/field"`` keys), and itself detached."""
        cfg = self.config
        pg_loss, v_loss, entropy, _ = self.losses(split_groups(minibatch))
        loss = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy
        return loss, loss.detach().reshape(1)

    def fold_in_returns(self, data: dict[str, torch.Tensor]) -> None:
        """With value normalisation: the rollout's values in the critic's units under the statistics
        the actors used (``"group/old_predictions"``, for the clipped value loss), then each policy's
        statistics updated with the returns of its groups' agents in the game, the sums averaged
        over learner copies."""
        if not len(self.agents.value_norms):
            return
        groups = split_groups(data)
        for g, b in groups.items():
            data[f"{g}{GROUP_SEPARATOR}old_predictions"] = cast(ValueNorm, self.agents.value_norm(g)).normalize(
                b["values"]
            )
        names = list(self.agents.value_norms)
        sums = [torch.zeros(3, dtype=torch.float64, device=self.device) for _ in names]
        for g, b in groups.items():
            index = names.index(self.agents.mapping[g])
            sums[index] = sums[index] + cast(ValueNorm, self.agents.value_norm(g)).batch_sums(b["returns"], b["active"])
        self.sync_mean(sums)
        for name, total in zip(names, sums):
            cast(ValueNorm, self.agents.value_norms[name]).update_from_sums(total)

    def losses(
        self, data: dict[str, dict[str, torch.Tensor]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Surrogate loss, value loss and entropy averaged over every agent sample in the game, and
        the new log-probabilities per group."""
        cfg = self.config
        every, predictions = self.forward(data)
        total = torch.stack([b["active"].sum() for b in data.values()]).sum().clamp(min=1.0)
        pg_loss = v_loss = entropy = torch.zeros((), device=self.device)
        logprobs = {}
        for g, b in data.items():
            head, norm, mask, params = self.agents.head(g), self.agents.value_norm(g), b["active"], every[g]
            logprobs[g] = head.log_prob(params, b["actions"])
            weight = mask.sum() / total
            adv = normalize_masked(b["advantages"], mask)  # 0 out of the game: no gradient there
            surrogate = clipped_surrogate(logprobs[g], b["logprobs"], adv, cfg.clip_coef) * mask.numel()
            pg_loss = pg_loss + surrogate / total
            target = b["returns"] if norm is None else norm.normalize(b["returns"])
            old = b["values"] if norm is None else b["old_predictions"]
            v_loss = v_loss + weight * masked_mean(self.value_error(predictions[g], old, target), mask)
            entropy = entropy + weight * masked_mean(head.entropy(params), mask)
        return pg_loss, v_loss, entropy, logprobs

    def forward(self, data: dict[str, dict[str, torch.Tensor]]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """Every group's distribution parameters and critic outputs on the batch; recurrent
        policies replay each environment's steps from the stored memories."""
        obs = {g: b["obs"] for g, b in data.items()}
        if self.agents.recurrent:
            memory = {g: b["memory"] for g, b in data.items()}
            first = next(iter(data.values()))["first"][..., 0]  # (env, step): episodes are per environment
            return self.agents.unroll(obs, memory, first, self.config.chunk_length)
        return {g: self.agents.net(g).policy(o) for g, o in obs.items()}, self.agents.predictions(obs)

    def value_error(self, value: torch.Tensor, old: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Per sample: Huber (or half the squared error with ``huber_delta`` 0), the larger of the
        unclipped and the clipped prediction's with ``clip_value_loss``."""
        cfg = self.config

        def error(v: torch.Tensor) -> torch.Tensor:
            if cfg.huber_delta > 0:
                return F.huber_loss(v, target, reduction="none", delta=cfg.huber_delta)
            return 0.5 * (v - target).square()

        if not cfg.clip_value_loss:
            return error(value)
        clipped = old + (value - old).clamp(-cfg.clip_coef, cfg.clip_coef)
        return torch.max(error(value), error(clipped))

    @torch.no_grad()
    def diagnostics(self, data: dict[str, torch.Tensor]) -> dict[str, float]:
        groups = split_groups(data)
        pg_loss, v_loss, entropy, logprobs = self.losses(groups)
        masks = torch.cat([b["active"].reshape(-1) for b in groups.values()])
        log_ratio = torch.cat([(logprobs[g] - b["logprobs"]).reshape(-1) for g, b in groups.items()])
        kl = masked_mean((log_ratio.exp() - 1) - log_ratio, masks)
        values = torch.stack([pg_loss, v_loss, entropy, kl, masks.mean()]).tolist()
        return {
            **dict(zip(("policy_loss", "value_loss", "entropy", "approx_kl", "active_fraction"), values)),
            "learning_rate": float(self.optimizer.param_groups[0]["lr"]),
        }

    def get_weights(self) -> Global:
        return copy_weights(self.agents)

    def state_dict(self) -> dict[str, Any]:
        return save_state(self, "agents", "optimizer", "generator", "updates")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self, state, "agents", "optimizer", "generator", "updates")
