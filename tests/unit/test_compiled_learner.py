"""The compiled learner step (``algo.compile``) is capture-ready without a GPU: one graph, no graph
break, no host sync inside an update, and the same update as the eager fused path.
The sync check runs the very function that gets compiled, eagerly, under a dispatch mode that
sees every aten operation (a ``.item()``, ``if tensor:``, a data-dependent shape or a copy to the
host shows up as the aten call that makes the host wait).  Steps are compared with eager after
tracing as inductor would (``aot_eager``, seconds); PPO's through inductor's C++ under -m slow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from algorithms.a2c import A2CConfig, A2CLearner
from algorithms.dqn import DQNConfig, DQNLearner
from algorithms.impala import IMPALAConfig, IMPALALearner
from algorithms.ppo import PPO, FusedPPOLearner, PPOConfig
from algorithms.sac import SACConfig, SACLearner
from msrl.core import Box, ConfigError, Deferred, Discrete, RunInfo
from msrl.rl import (
    CompiledGradientStep,
    CompiledPPOUpdate,
    PPOStepConfig,
    ReplayBatch,
    RolloutBatch,
    TrajectoryBatch,
    adam_,
    adam_state,
    compile_mode,
    ppo_twin_steps_,
    rmsprop_,
)

SYNC_OPS = {
    torch.ops.aten._local_scalar_dense.default,  # .item(), float(t), int(t)
    torch.ops.aten.is_nonzero.default,  # bool(t), `if t:`
    torch.ops.aten.equal.default,  # torch.equal returns a Python bool
    torch.ops.aten.nonzero.default,  # data-dependent shapes
    torch.ops.aten.masked_select.default,
}


class SyncCounter(TorchDispatchMode):
    """Every aten call that makes the host wait for the device, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[str] = []
        self.ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.ops += 1
        if func in SYNC_OPS:
            self.syncs.append(str(func))
        if func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default):  # device -> host copies
            src = args[1] if func is torch.ops.aten.copy_.default else args[0]
            dst = args[0].device if func is torch.ops.aten.copy_.default else kwargs.get("device", src.device)
            if src.device.type != "cpu" and torch.device(dst).type == "cpu":
                self.syncs.append(f"{func} to cpu")
        return func(*args, **kwargs)


def _config(**overrides: Any) -> PPOConfig:
    base: dict[str, Any] = dict(num_envs=8, num_steps=16, update_epochs=2, num_minibatches=4, fused=True)
    return PPOConfig(**{**base, **overrides})


def _batch(n: int, seed: int = 1) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    obs, actions = torch.randn(n, 4, generator=g), torch.randint(2, (n,), generator=g)
    logprobs, rest = -torch.rand(n, generator=g) - 0.2, torch.randn(3, n, generator=g)
    return RolloutBatch(obs, actions, logprobs, *rest)


def _learner(config: PPOConfig) -> FusedPPOLearner:
    return FusedPPOLearner(4, Discrete(2), config, RunInfo(seed=3, total_env_steps=10 * config.batch_size))


def _metrics(out: Any) -> dict[str, float]:
    return out.resolve() if isinstance(out, Deferred) else out


def _step_args(learner: FusedPPOLearner, batch: RolloutBatch) -> tuple[Any, ...]:
    params = learner.params[0]
    adam = adam_state(learner.optimizer, params)
    rows = batch.obs.shape[0] // learner.config.num_minibatches
    order = torch.randperm(batch.obs.shape[0], generator=learner.generator)[:rows].view(1, rows)
    return params.detach(), adam, torch.tensor(learner.config.learning_rate), tuple(batch), order


Learned = tuple[FusedPPOLearner, FusedPPOLearner, dict[str, float]]


def _learned(backend: str) -> Learned:
    """An eager and a compiled fused learner, same seed, after one ``learn`` on the same batch, and
    the compiled one's metrics.  ``aot_eager`` traces the step as inductor does and runs the traced
    graph (seconds); ``inductor`` also generates and compiles its C++ (20-50 s with a cold cache)."""
    config = _config(ent_coef=0.01, clip_vloss=True)
    eager, compiled = _learner(config), _learner(_config(ent_coef=0.01, clip_vloss=True, compile=True))
    assert eager.compiled is None and compiled.compiled is not None
    if backend != "inductor":
        compiled.compiled = CompiledPPOUpdate(compiled.compiled.cfg, "default", backend=backend)
    batch = _batch(config.batch_size)
    _metrics(eager.learn(batch))
    return eager, compiled, _metrics(compiled.learn(batch))


@pytest.fixture(scope="module")
def compiled() -> Learned:
    return _learned("aot_eager")


# inductor's code generation and C++ build (cold: 20-50 s on 2 cores) under -m slow
@pytest.mark.parametrize("backend", ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_the_compiled_update_equals_the_eager_one(backend: str, compiled: Learned) -> None:
    eager, fast, _ = compiled if backend == "aot_eager" else _learned(backend)
    torch.testing.assert_close(fast.params[0], eager.params[0], atol=1e-5, rtol=1e-4)
    assert (fast.params[0] - _learner(_config()).params[0]).abs().max() > 1e-3  # the update moved the weights
    for name in ("exp_avg", "exp_avg_sq", "step"):  # the optimiser's state, as torch.optim.Adam keeps it
        want, got = eager.optimizer.state[eager.params[0]][name], fast.optimizer.state[fast.params[0]][name]
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)


def test_compile_time_is_reported_apart(compiled: Learned) -> None:
    assert compiled[2]["compile_seconds"] > 0
    assert "compile_seconds" not in compiled[0].diagnostics(*_batch(compiled[0].config.batch_size))


@pytest.mark.parametrize("overrides", [{}, {"ent_coef": 0.01, "clip_vloss": True}, {"norm_adv": False}])
def test_the_step_has_one_graph_and_no_break(overrides: dict[str, Any]) -> None:
    learner = _learner(_config(**overrides))
    cfg = PPOStepConfig.of(learner.config, learner.net.layout)  # type: ignore[arg-type]

    def step(flat: torch.Tensor, adam: Any, lr: torch.Tensor, data: Any, order: torch.Tensor) -> None:
        ppo_twin_steps_(flat, adam, lr, data, order, cfg)

    explanation = torch._dynamo.explain(step)(*_step_args(learner, _batch(learner.config.batch_size)))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.parametrize("grad_sync", [False, True])
def test_an_update_makes_no_host_sync(grad_sync: bool) -> None:
    learner = _learner(_config(ent_coef=0.01, clip_vloss=True))
    learner.compiled = CompiledPPOUpdate(PPOStepConfig.of(learner.config, learner.net.layout), None)  # type: ignore[arg-type]
    synced: list[torch.Tensor] = []
    sync: Callable[[torch.Tensor], None] | None = synced.append if grad_sync else None
    cfg, data = learner.config, tuple(_batch(learner.config.batch_size))
    with SyncCounter() as counter:
        learner.compiled(learner.params[0], learner.optimizer, data, 2, cfg.num_minibatches, learner.generator, sync)
    assert counter.ops > 100  # it saw the update
    assert counter.syncs == []
    assert len(synced) == (2 * cfg.num_minibatches if grad_sync else 0)


def test_the_counter_sees_a_sync() -> None:
    with SyncCounter() as counter:
        x = torch.ones(3)
        if (x > 0).all():
            x.sum().item()
    assert len(counter.syncs) == 2


def test_functional_adam_matches_torch() -> None:
    g = torch.Generator().manual_seed(0)
    ref = torch.nn.Parameter(torch.randn(50, generator=g))
    optimizer = torch.optim.Adam([ref], lr=3e-3, eps=1e-5)
    param, (exp_avg, exp_avg_sq, step) = ref.detach().clone(), (torch.zeros(50), torch.zeros(50), torch.zeros(()))
    for _ in range(5):
        grad = torch.randn(50, generator=g)
        ref.grad = grad.clone()
        optimizer.step()
        adam_(param, grad, exp_avg, exp_avg_sq, step, torch.tensor(3e-3))
    torch.testing.assert_close(param, ref.detach(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(exp_avg_sq, optimizer.state[ref]["exp_avg_sq"])


@pytest.mark.parametrize("value", ["yes", 1, "reduce-overhead", None])
def test_a_bad_compile_option_names_the_choices(value: Any) -> None:
    with pytest.raises(ConfigError, match="auto, true, false"):
        _config(compile=value).validate()


def test_auto_compiles_on_cuda_only() -> None:
    assert compile_mode("auto", "cpu") is None and compile_mode(False, "cuda") is None
    assert compile_mode("true", "cpu") == "default"
    assert compile_mode("auto", "cuda") == compile_mode(True, "cuda:0") == "reduce-overhead"
    assert PPO(_config(num_envs=4, fused=True)).learner.compiled is None  # type: ignore[attr-defined]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA-graph capture (mode reduce-overhead) needs a GPU")
def test_the_cuda_graph_step_equals_the_eager_one() -> None:
    config = _config(ent_coef=0.01)
    run = RunInfo(seed=3, total_env_steps=10 * config.batch_size, device="cuda")
    eager = FusedPPOLearner(4, Discrete(2), _config(ent_coef=0.01, compile=False), run)
    graphed = FusedPPOLearner(4, Discrete(2), config, run)
    assert graphed.compiled is not None and graphed.compiled.steps.mode == "reduce-overhead"
    for _ in range(3):  # warm-up, capture, replay
        batch = _batch(config.batch_size)
        _metrics(eager.learn(batch))
        _metrics(graphed.learn(batch))
    torch.testing.assert_close(graphed.params[0], eager.params[0], atol=1e-4, rtol=1e-3)


# -- A2C and IMPALA: the learner's own loss through torch.func ---------------------------------------
def _a2c(compile: bool | str = False, **overrides: Any) -> A2CLearner:
    config = A2CConfig(num_envs=4, num_steps=5, ent_coef=0.01, norm_adv=True, compile=compile, **overrides)
    space = Box(-1.0, 1.0, (2,)) if overrides.get("optimizer") == "adam" else Discrete(2)
    return A2CLearner(4, space, config, RunInfo(seed=2, total_env_steps=1000))


def _a2c_batch(learner: A2CLearner) -> tuple[torch.Tensor, ...]:
    g, n = torch.Generator().manual_seed(0), 20
    discrete = learner.config.optimizer == "rmsprop"
    actions = torch.randint(2, (n,), generator=g) if discrete else torch.randn(n, 2, generator=g)
    return torch.randn(n, 4, generator=g), actions, torch.zeros(n), torch.zeros(n), *torch.randn(2, n, generator=g)


def _impala(compile: bool | str = False) -> IMPALALearner:
    config = IMPALAConfig(num_envs=4, num_steps=6, update_epochs=2, num_minibatches=2, compile=compile)
    return IMPALALearner(4, Discrete(2), config, RunInfo(seed=2, total_env_steps=1000))


def _trajectories(envs: int = 4, steps: int = 6) -> TrajectoryBatch:
    g = torch.Generator().manual_seed(0)
    done = (torch.rand(envs, steps, generator=g) < 0.2).float()
    return TrajectoryBatch(
        torch.randn(envs, steps, 4, generator=g),
        torch.randint(2, (envs, steps), generator=g),
        -torch.rand(envs, steps, generator=g) - 0.2,
        torch.randn(envs, steps, generator=g),
        done,
        torch.zeros(envs, steps),
        torch.randn(envs, 4, generator=g),
    )


def _dqn(compile: bool | str = False, double_dqn: bool = False) -> DQNLearner:
    config = DQNConfig(num_envs=2, batch_size=8, gradient_steps=3, hidden_sizes=(16, 16), compile=compile)
    config.double_dqn = double_dqn
    return DQNLearner(4, 2, config, RunInfo(seed=2, total_env_steps=1000))


def _replay(steps: int = 3) -> ReplayBatch:
    g = torch.Generator().manual_seed(0)
    done = (torch.rand(8, steps, generator=g) < 0.2).float()
    obs, rewards, next_obs = torch.randn(8, steps, 4, generator=g), torch.randn(8, steps), torch.randn(8, steps, 4)
    return ReplayBatch(obs, torch.randint(2, (8, steps), generator=g), rewards, next_obs, done)


Learners = A2CLearner | IMPALALearner | DQNLearner


def _func_step(learner: Learners, mode: str | None, backend: str = "inductor") -> CompiledGradientStep:
    return learner.compiled_step(mode, backend)  # the learner's own step, in another mode or backend


def _func_args(learner: Learners) -> tuple[Any, ...]:
    """The step's arguments on the batch each learner's test uses (A2C: its 4 loss inputs)."""
    if isinstance(learner, A2CLearner):
        obs, actions, _, _, advantages, returns = _a2c_batch(learner)
        return obs, actions, advantages, returns
    if isinstance(learner, DQNLearner):
        return tuple(_replay().minibatch(0))
    return tuple(_trajectories(envs=2))  # one IMPALA minibatch


FUNC_CASES: dict[str, Callable[[], Learners]] = {
    "a2c-rmsprop": _a2c,
    "a2c-adam-box": lambda: _a2c(optimizer="adam"),
    "impala": _impala,
    "dqn-double": lambda: _dqn(double_dqn=True),
}


@pytest.mark.parametrize("case", list(FUNC_CASES))
def test_the_func_step_has_one_graph_and_no_break(case: str) -> None:
    learner = FUNC_CASES[case]()
    step = _func_step(learner, None)
    params = tuple(p.detach() for p in step.params)
    read, lr = tuple(t.detach() for t in step.read), torch.tensor(1e-3)
    explanation = torch._dynamo.explain(step.step.fn)(params, read, step.states(), lr, *_func_args(learner))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.parametrize("grad_sync", [False, True])
@pytest.mark.parametrize("case", list(FUNC_CASES))
def test_a_func_step_makes_no_host_sync(case: str, grad_sync: bool) -> None:
    learner = FUNC_CASES[case]()
    step, synced = _func_step(learner, None), list[list[torch.Tensor]]()
    with SyncCounter() as counter:
        step(*_func_args(learner), sync_grads=synced.append if grad_sync else None)
    assert counter.ops > 50 and counter.syncs == []
    assert len(synced) == grad_sync


@pytest.mark.parametrize("case", ["a2c-rmsprop", "impala", "dqn-double"])  # Adam and Box: the sync and break tests
def test_the_traced_func_step_equals_the_eager_update(case: str) -> None:
    eager, traced = FUNC_CASES[case](), FUNC_CASES[case]()
    traced.compiled = _func_step(traced, "default", backend="aot_eager")
    batch: Any = _trajectories() if isinstance(eager, IMPALALearner) else _replay()
    if isinstance(eager, A2CLearner):
        batch = _a2c_batch(eager)
    want, got = eager.learn(batch), traced.learn(batch)
    assert got.pop("compile_seconds") > 0
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    for a, b in zip(_func_step(eager, None).params, _func_step(traced, None).params):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    state = eager.optimizer.state_dict()["state"]
    for key, values in traced.optimizer.state_dict()["state"].items():
        for name, value in values.items():
            torch.testing.assert_close(value, state[key][name], atol=1e-6, rtol=1e-5)


def test_functional_rmsprop_matches_torch() -> None:
    g = torch.Generator().manual_seed(0)
    ref = torch.nn.Parameter(torch.randn(50, generator=g))
    optimizer = torch.optim.RMSprop([ref], lr=7e-4, alpha=0.99, eps=1e-5)
    param, square_avg, step = ref.detach().clone(), torch.zeros(50), torch.zeros(())
    for _ in range(5):
        grad = torch.randn(50, generator=g)
        ref.grad = grad.clone()
        optimizer.step()
        rmsprop_(param, grad, square_avg, step, torch.tensor(7e-4), 0.99, 1e-5)
    torch.testing.assert_close(param, ref.detach(), atol=1e-6, rtol=1e-5)
    assert step.item() == 5


# -- SAC: the critics' and the policy's steps, the Gaussian noise drawn outside -----------------------
def _sac(compile: bool | str = False) -> SACLearner:
    config = SACConfig(batch_size=8, gradient_steps=3, hidden_sizes=(16, 16), policy_frequency=2, compile=compile)
    config.max_grad_norm = 1.0
    return SACLearner(3, Box(-2.0, 2.0, (1,)), config, RunInfo(seed=2, total_env_steps=1000))


def _sac_args(learner: SACLearner) -> tuple[tuple[torch.Tensor, ...], ...]:
    """The critic step's, the policy step's and the temperature step's arguments for one minibatch."""
    obs, actions, rewards, next_obs, terminated = _replay_box().minibatch(0)
    alpha, logprobs = learner.log_alpha.detach().exp(), -torch.rand(())
    replayed = (obs, actions, rewards, next_obs, terminated, learner.noise(obs), alpha)
    return replayed, (obs, learner.noise(obs), alpha), (logprobs,)


def _replay_box() -> ReplayBatch:
    g = torch.Generator().manual_seed(0)
    obs, next_obs = torch.randn(8, 3, 3, generator=g), torch.randn(8, 3, 3, generator=g)
    actions, rewards = torch.rand(8, 3, 1, generator=g) * 4 - 2, torch.randn(8, 3, generator=g)
    return ReplayBatch(obs, actions, rewards, next_obs, (torch.rand(8, 3, generator=g) < 0.2).float())


def test_the_sac_steps_have_one_graph_no_break_and_no_sync() -> None:
    learner = _sac()
    for step, args in zip(learner.compiled_steps(None), _sac_args(learner), strict=True):
        params = tuple(p.detach() for p in step.params)
        read = tuple(t.detach() for t in step.read)
        explanation = torch._dynamo.explain(step.step.fn)(params, read, step.states(), torch.tensor(1e-3), *args)
        assert explanation.graph_break_count == 0, explanation.break_reasons
        assert explanation.graph_count == 1
        with SyncCounter() as counter:
            step(*args)
        assert counter.ops > 10 and counter.syncs == []


def test_the_traced_sac_steps_equal_the_eager_update() -> None:
    eager, traced = _sac(), _sac()
    traced.compiled = traced.compiled_steps("default", backend="aot_eager")
    want, got = eager.learn(_replay_box()), traced.learn(_replay_box())
    assert got.pop("compile_seconds") > 0
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    for a, b in zip([*eager.policy_params, *eager.critic_params], [*traced.policy_params, *traced.critic_params]):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(traced.log_alpha, eager.log_alpha)
    assert traced.generator.get_state().equal(eager.generator.get_state())  # the same noise, drawn in the same order


@pytest.mark.parametrize("make", [_a2c, _impala, _dqn, _sac])
def test_a2c_impala_dqn_and_sac_compile_only_when_asked(make: Callable[..., Any]) -> None:
    assert make().compiled is None and make("auto").compiled is None  # auto: eager on the CPU
    assert make(True).compiled is not None
    with pytest.raises(ConfigError, match="auto, true, false"):
        make("always").config.validate()
