"""REINFORCE with a learned baseline (Williams, 1992) on msrl's public API: docs/guide.md's example."""
from dataclasses import dataclass

import torch

import msrl.envs  # binds msrl too
from msrl.rl import ActorCritic, ActorCriticActor, RolloutBuffer, action_layout, copy_weights, load_state, save_state


@dataclass
class ReinforceConfig:
    env_id: str = "CartPole-v1"
    num_envs: int = msrl.split(16)  # environments in the whole run: msrl shares them out among copies
    num_steps: int = 128  # steps per environment per iteration
    gamma: float = 0.99
    learning_rate: float = 2e-3


class ReinforceLearner(msrl.Learner):
    def __init__(self, net, lr): self.net, self.optimizer = net, torch.optim.Adam(net.parameters(), lr=lr)
    def get_weights(self): return copy_weights(self.net)  # what the actors receive
    def state_dict(self): return save_state(self, "net", "optimizer")  # what checkpoints hold (exact resume)
    def load_state_dict(self, state): load_state(self, state, "net", "optimizer")

    def learn(self, batch):
        dist, values = self.net(batch.obs)
        advantages = batch.returns - values.detach()  # Monte-Carlo return minus the baseline
        policy_loss = -(self.net.head.log_prob(dist, batch.actions) * advantages).mean()
        value_loss = 0.5 * (batch.returns - values).square().mean()
        self.optimizer.zero_grad()
        (policy_loss + value_loss).backward()
        self.sync_grads(list(self.net.parameters()))  # averaged over learner copies when there are several
        self.optimizer.step()
        return {"policy_loss": policy_loss.item(), "value_loss": value_loss.item()}


class Reinforce(msrl.Algorithm):
    name, Config = "reinforce", ReinforceConfig

    def __init__(self, config: ReinforceConfig, run: msrl.RunInfo) -> None:
        super().__init__(config, run)
        spec = msrl.envs.spec(config.env_id)
        obs_dim, net = spec.observation_space.shape[0], lambda: ActorCritic(obs_dim, spec.action_space, 64, run.seed)
        self.env = msrl.envs.make(config.env_id, config.num_envs, seed=run.seed_for("env"), defaults=run.env_defaults)
        self.actor = ActorCriticActor(net(), seed=run.seed_for("actor"))  # sampling: this copy's own stream
        self.buffer = RolloutBuffer(config.num_steps, config.num_envs, (obs_dim,), *action_layout(spec.action_space),
                                    gamma=config.gamma, gae_lambda=1.0)  # lambda 1: Monte-Carlo returns
        self.learner = ReinforceLearner(net(), config.learning_rate)

    def train_step(self):
        obs = self.env.observe()
        for _ in msrl.steps(self.config.num_steps):  # rollout
            action, logprob, value = self.actor.act(obs)
            next_obs, reward, terminated, truncated = self.env.step(action)
            self.buffer.insert(obs, action, logprob, value, reward, terminated, truncated)
            obs = next_obs
        metrics = self.learner.learn(self.buffer.drain(self.actor.value(obs)))  # returns bootstrapped at the end
        self.actor.set_weights(self.learner.get_weights())  # sync
        return metrics
