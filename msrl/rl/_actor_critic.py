"""The actor-critic network and actor component that the on-policy algorithms (PPO, A2C, IMPALA)
share: ordinary torch modules with autograd, for a researcher to read and edit."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from msrl.core import Actor, Batched, Box, ConfigError, Discrete, NoValue, Space
from msrl.rl._compiled_call import CompiledCall
from msrl.rl._heads import CategoricalHead, GaussianHead, init_
from msrl.rl._normalize import RunningMeanStd
from msrl.rl._state import load_generator_state, load_weights

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}
"""The hidden-layer activations ``ActorCritic`` offers, by the name a config gives."""


def action_head(
    features: int,
    action_space: Space,
    generator: torch.Generator | None = None,
    log_std_init: float = 0.0,
    gain: float | None = 0.01,
) -> CategoricalHead | GaussianHead:
    """A categorical head for ``Discrete`` actions, a diagonal Gaussian one for ``Box`` actions."""
    if isinstance(action_space, Discrete):
        return CategoricalHead(features, action_space.n, gain, generator)
    if isinstance(action_space, Box):
        dim = 1
        for size in action_space.shape:
            dim *= size
        return GaussianHead(features, dim, gain, log_std_init, generator)
    raise ConfigError(f"no action head for {type(action_space).__name__} actions; supported: Discrete, Box")


def check_activation(name: str, key: str = "algo.activation") -> None:
    """A ``ConfigError`` naming the choices unless ``name`` is one of ``ACTIVATIONS``."""
    if name not in ACTIVATIONS:
        raise ConfigError(f"{key} must be one of: {', '.join(ACTIVATIONS)}; got {name!r}")


def hidden_layers(
    fan_in: int,
    hidden: int,
    activation: str = "tanh",
    layer_norm: bool = False,
    generator: torch.Generator | None = None,
    ortho_init: bool = True,
) -> list[nn.Module]:
    """Two hidden layers of width ``hidden`` (orthogonal, gain sqrt(2), or PyTorch's default
    initialisation), drawn from ``generator`` in order; with ``layer_norm`` a ``LayerNorm`` on the
    input and after each activation (the MAPPO paper's ``MLPBase``)."""
    act, gain = ACTIVATIONS[activation], 2**0.5 if ortho_init else None
    norm = (lambda size: [nn.LayerNorm(size)]) if layer_norm else (lambda size: [])
    first = init_(nn.Linear(fan_in, hidden), gain, generator)
    second = init_(nn.Linear(hidden, hidden), gain, generator)
    return [*norm(fan_in), first, act(), *norm(hidden), second, act(), *norm(hidden)]


class ActorCritic(nn.Module):
    """Separate policy and value MLPs with ``tanh`` hidden layers, initialised as in the PPO
    paper's code (orthogonal, gain sqrt(2) in hidden layers, 1 for the value output, 0.01 for the
    policy output, zero biases).  The value tower is drawn first, then the policy tower, in the
    same order every time: a seed gives the same network.

    ``activation="relu"`` and ``ortho_init=False`` (PyTorch's default initialisation, drawn from
    the same seed) give SB3's ``MlpPolicy`` with ``activation_fn=nn.ReLU, ortho_init=False``, the
    form rl-zoo tunes some MuJoCo entries for.  ``layer_norm=True`` puts a ``LayerNorm`` on each
    tower's input and after each hidden activation, as the MAPPO paper's ``MLPBase`` (its
    ``use_feature_normalization``) does; the linear layers are drawn as without it.

    ``forward(obs)`` returns ``(dist_params, value)``; ``self.head`` samples from and scores
    ``dist_params`` (logits, or Gaussian mean and log-std).
    """

    def __init__(
        self,
        obs_dim: int,
        action_space: Space,
        hidden: int = 64,
        seed: int = 0,
        log_std_init: float = 0.0,
        critic_dim: int | None = None,
        activation: str = "tanh",
        ortho_init: bool = True,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        check_activation(activation, "activation")
        generator = torch.Generator().manual_seed(seed)
        critic_in = obs_dim if critic_dim is None else critic_dim
        tower = (hidden, activation, layer_norm, generator, ortho_init)
        self.critic = nn.Sequential(
            *hidden_layers(critic_in, *tower), init_(nn.Linear(hidden, 1), 1.0 if ortho_init else None, generator)
        )
        self.torso = nn.Sequential(*hidden_layers(obs_dim, *tower))
        self.head = action_head(hidden, action_space, generator, log_std_init, 0.01 if ortho_init else None)

    def forward(self, obs: torch.Tensor) -> tuple[Any, torch.Tensor]:
        return self.head(self.torso(obs)), self.critic(obs).squeeze(-1)

    def policy(self, obs: torch.Tensor) -> Any:
        """The action distribution's parameters alone."""
        return self.head(self.torso(obs))

    def value(self, critic_in: torch.Tensor) -> torch.Tensor:
        """The critic on its input: the observation, or with ``critic_dim`` whatever the caller
        gives it (MAPPO's global state and observation); ``forward`` needs ``critic_dim`` unset."""
        return self.critic(critic_in).squeeze(-1)


ActorCriticNet = Any
"""An actor-critic network: ``ActorCritic``, ``msrl.rl.SharedActorCritic`` or one of the same
interface (``forward(obs) -> (dist_params, value)``, ``policy``, ``value``, ``head``)."""

OBS_STATS = "obs_stats"
"""The prefix under which a learner's weights carry its observation statistics to the actors
(``obs_stats.mean``, ``obs_stats.var``, ``obs_stats.count``), so the weights stay one flat mapping
that any transport between fragments can carry."""


def obs_stats_weights(stats: RunningMeanStd) -> dict[str, Any]:
    """``stats`` as entries of a learner's flat weights (keys prefixed ``OBS_STATS + "."``), which
    ``ActorCriticActor.set_weights`` reads back."""
    return {f"{OBS_STATS}.{key}": value for key, value in stats.state_dict().items()}


def sample(
    net: ActorCriticNet, obs: torch.Tensor, noise: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(action, log_prob, value)`` of an actor-critic ``net`` on ``obs``, its head sampling from
    ``noise`` (what the head's ``noise`` draws): ``ActorCriticActor``'s draw, eager and compiled."""
    params, value = net(obs)
    action, logprob = net.head.sample(params, None, noise)
    return action, logprob, value


def as_observation(obs: Any, device: torch.device) -> torch.Tensor:
    """A batch of observations on ``device``: uint8 frames kept as they are (the network scales
    them; a NumPy array on the CPU is shared, not copied), anything else as float32."""
    tensor = torch.as_tensor(obs, device=device)
    return tensor if tensor.dtype == torch.uint8 else tensor.to(torch.float32)


class ActorCriticActor(Actor):
    """Acts with its own copy of an actor-critic network: ``act(obs) -> (action, logprob, value)``.

    With ``normalize_obs`` the actor standardises every observation it is given (``act``,
    ``value``, ``greedy``: all take raw observations) by running statistics it does not update
    itself: they come from the learner with the weights (``set_weights`` takes the learner's
    weights plus ``obs_stats_weights(statistics)``), the learner folding in each batch
    after learning from it.  So the network and the statistics it was trained with travel
    together, and every actor copy of every distribution policy normalises alike (per-copy
    statistics drift apart: BENCHMARKS.md, "Does every algorithm learn under every preset?").
    The buffer stores raw observations.
    (The statistics travel as flat entries of the weights: ``obs_stats_weights``.)

    ``compile``: ``algo.compile``.  ``act`` is ``sample`` through a ``msrl.rl.CompiledCall``, its
    noise drawn from the actor's generator outside, so the eager and compiled draws consume the
    same stream; ``key`` names that call's region (the algorithm's config).
    """

    def __init__(
        self,
        net: ActorCriticNet,
        seed: int,
        device: str = "cpu",
        normalize_obs: bool = False,
        obs_shape: tuple[int, ...] = (),
        compile: Any = "false",
        key: str | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.net = net.to(self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.obs_stats = RunningMeanStd(obs_shape, device=self.device) if normalize_obs else None
        self.draw = CompiledCall(self.net, sample, compile, key=key)
        self.outputs = int(net.head.linear.out_features)  # the width of the head's distribution parameters
        self._rows: int | None = None  # the rows of the last act: the shape the draw's region was built for

    def _obs(self, obs: Any) -> torch.Tensor:
        obs = as_observation(obs, self.device)
        return obs if self.obs_stats is None else self.obs_stats.normalize(obs)

    @torch.inference_mode()
    def act(self, obs: Any) -> tuple[Batched, Batched, Batched]:
        obs = self._obs(obs)
        noise = self.net.head.noise((obs.shape[0], self.outputs), self.generator, obs.device, torch.float32)
        self._rows = obs.shape[0]
        action, logprob, value = self.draw(obs, noise)
        return action, logprob, value

    @torch.inference_mode()
    def value(self, obs: Any) -> Batched:
        """The value of ``obs``: from the compiled draw fed zeros for noise (the value does not read
        it) where it is ready and ``obs`` has the rows of the last ``act`` (a rollout's last
        observations), else from the network."""
        obs = self._obs(obs)
        if self.draw.ready and obs.shape[0] == self._rows:
            return self.draw(obs, torch.zeros((obs.shape[0], self.outputs), device=obs.device))[2]
        return self.net(obs)[1]

    @torch.inference_mode()
    def greedy(self, obs: Any) -> Batched:
        return self.net.head.mode(self.net(self._obs(obs))[0])

    def set_weights(self, weights: dict[str, Any]) -> NoValue:
        prefix = OBS_STATS + "."
        stats = {key.removeprefix(prefix): value for key, value in weights.items() if key.startswith(prefix)}
        load_weights(self.net, {key: value for key, value in weights.items() if not key.startswith(prefix)})
        if stats and self.obs_stats is not None:
            self.obs_stats.load_state_dict(stats)

    def state_dict(self) -> dict[str, Any]:
        state = {"net": self.net.state_dict(), "generator": self.generator.get_state()}
        if self.obs_stats is not None:
            state["obs_stats"] = self.obs_stats.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        load_generator_state(self.generator, state["generator"])
        if self.obs_stats is not None:
            self.obs_stats.load_state_dict(state["obs_stats"])
