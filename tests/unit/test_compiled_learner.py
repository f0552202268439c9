"""Every learner's update is one piece of code run two ways (``msrl.rl.GradientStep``): eagerly
(``backward``, the clip, ``optimizer.step()``) and as one compiled region (``torch.func.grad`` of
the same loss, the same clip, torch's functional form of the same optimizer).  For every algorithm,
learning from the same batches both ways leaves the same weights and optimizer state, and a run
that switches midway continues as the eager one does.  The region is one graph with no break and
no host sync, so it stays capture-ready (a CUDA graph) without a GPU: the sync check runs the
very function that gets compiled, eagerly, under a dispatch mode that sees every aten operation.

The compiled side runs as its traced graph (``backend="traced"``: the arithmetic inductor builds,
in seconds); building it with inductor is under -m slow (``test_aot_step.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from algorithms.a2c import A2C, A2CConfig
from algorithms.dqn import DQN, DQNConfig
from algorithms.impala import IMPALA, IMPALAConfig
from algorithms.mappo import MAPPO, MAPPOConfig
from algorithms.ppo import PPO, PPOConfig
from algorithms.sac import SAC, SACConfig
from msrl.core import ConfigError, Deferred, RunInfo
from msrl.rl import GradientStep, clip_grad_norm_, compile_option

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


def test_the_counter_sees_a_sync() -> None:
    with SyncCounter() as counter:
        x = torch.ones(3)
        if (x > 0).all():
            x.sum().item()
    assert len(counter.syncs) == 2


# -- every algorithm: one update, two ways ---------------------------------------------------------------
ALGORITHMS: dict[str, tuple[Callable[..., Any], Callable[..., Any], dict[str, Any]]] = {
    "ppo-discrete": (PPO, PPOConfig, dict(num_envs=4, num_steps=16, num_minibatches=4, ent_coef=0.01, clip_vloss=True)),
    "ppo-box": (PPO, PPOConfig, dict(env_id="Pendulum-v1", num_envs=4, num_steps=16, normalize_obs=True)),
    "a2c-rmsprop": (A2C, A2CConfig, dict(num_envs=4, ent_coef=0.01, norm_adv=True)),
    "a2c-adam-box": (A2C, A2CConfig, dict(env_id="Pendulum-v1", num_envs=4, optimizer="adam")),
    # rho_bar above 1: on-policy ratios are 1 exactly, and rho_clipped would count rounding ties
    "impala": (IMPALA, IMPALAConfig, dict(num_envs=4, num_steps=8, update_epochs=2, num_minibatches=2, rho_bar=1.5)),
    "appo": (IMPALA, IMPALAConfig, dict(num_envs=4, num_steps=8, clip_coef=0.2, rho_bar=1.5)),
    "dqn-double": (
        DQN,
        DQNConfig,
        dict(num_envs=4, train_frequency=4, gradient_steps=4, batch_size=16, learning_starts=16, double_dqn=True),
    ),
    "dqn-mse-unclipped": (
        DQN,
        DQNConfig,
        dict(num_envs=4, train_frequency=4, gradient_steps=4, batch_size=16, learning_starts=16, loss="mse"),
    ),
    "sac": (
        SAC,
        SACConfig,
        dict(num_envs=2, train_frequency=8, gradient_steps=4, batch_size=8, learning_starts=8, policy_frequency=2),
    ),
    "sac-clipped-fixed-alpha": (
        SAC,
        SACConfig,
        dict(num_envs=2, train_frequency=8, gradient_steps=3, batch_size=8, learning_starts=8, autotune=False),
    ),
    "mappo": (MAPPO, MAPPOConfig, dict(num_envs=2, num_steps=8, update_epochs=2, num_minibatches=2)),
    # Convolutional networks on uint8 frames (MinAtar's 10x10, Atari's 84x84) at the step sizes of
    # their Atari settings: eager and compiled kernels sum a layer's thousands of products in
    # different orders, and at CartPole's step sizes Adam turns those roundings, on weights whose
    # gradient is near zero, into steps of opposite sign.
    "ppo-impala-cnn": (
        PPO,
        PPOConfig,
        dict(
            env_id="MinAtar/Breakout-v1",
            network="impala_cnn",
            num_envs=2,
            num_steps=8,
            num_minibatches=2,
            learning_rate=2.5e-4,
        ),
    ),
    "impala-impala-cnn": (
        IMPALA,
        IMPALAConfig,
        dict(
            env_id="MinAtar/Breakout-v1", network="impala_cnn", num_envs=2, num_steps=4, rho_bar=1.5, learning_rate=6e-4
        ),
    ),
    "dqn-nature-cnn": (
        DQN,
        DQNConfig,
        dict(
            env_id="ALE/Pong-v5",
            network="nature_cnn",
            num_envs=2,
            train_frequency=4,
            gradient_steps=2,
            batch_size=8,
            learning_starts=8,
            buffer_size=64,
            learning_rate=1e-4,
        ),
    ),
}
"""Each algorithm, with the options that change its loss or its optimizer's work."""


def _steps(learner: Any) -> list[GradientStep]:
    return [value for value in vars(learner).values() if isinstance(value, GradientStep)]


def _compile_traced(learner: Any) -> None:
    """From the next call on, every step of ``learner`` runs as its traced region."""
    for step in _steps(learner):
        for region in step.regions.values():
            region.option, region.started, region.backend = "true", False, "traced"


def _algorithm(case: str, **overrides: Any) -> Any:
    cls, config_cls, options = ALGORITHMS[case]
    config = config_cls(**{**options, **overrides})
    if case == "dqn-mse-unclipped":
        config.max_grad_norm = 0.0
    if case == "sac-clipped-fixed-alpha":
        config.max_grad_norm = 1.0
    return cls(config, RunInfo(seed=3, total_env_steps=10_000))


def _batches(algorithm: Any, iterations: int) -> list[Any]:
    """The batches ``algorithm``'s learner learned from in ``iterations`` iterations (warm-up ones left out)."""
    seen: list[Any] = []
    learn = algorithm.learner.learn

    def recording(batch: Any) -> Any:
        seen.append(batch)
        return learn(batch)

    algorithm.learner.learn = recording
    for _ in range(iterations):
        algorithm.train_step()
    return seen


def _resolved(metrics: Any) -> dict[str, float]:
    return metrics.resolve() if isinstance(metrics, Deferred) else metrics


def _assert_same_state(got: Any, want: Any, where: str = "state") -> None:
    if isinstance(want, torch.Tensor):
        if want.dtype == torch.uint8:  # generator states: the same draws, exactly
            assert torch.equal(got, want), where
        else:
            torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-4, msg=where)
    elif isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for key in want:
            _assert_same_state(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, (list, tuple)):
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _assert_same_state(a, b, f"{where}[{i}]")
    else:
        assert got == want, where


SLOW_CASES = {"impala-impala-cnn", "dqn-nature-cnn"}
"""Cases left to ``-m slow`` (the default suite's 6-minute budget): the default suite keeps one
convolutional case, PPO's."""


@pytest.mark.parametrize(
    "case", [pytest.param(case, marks=pytest.mark.slow) if case in SLOW_CASES else case for case in ALGORITHMS]
)
def test_the_compiled_update_equals_the_eager_one(case: str) -> None:
    """The same batches learned eagerly and compiled (from the first step, and switching after the
    first learn) leave the same weights, optimizer state and metrics."""
    source = _algorithm(case, compile=False)
    batches = _batches(source, iterations=3)
    assert len(batches) >= 2, "the learner learned"
    eager, compiled, switched = (_algorithm(case, compile=False) for _ in range(3))
    _compile_traced(compiled.learner)
    for i, batch in enumerate(batches):
        if i == 1:
            _compile_traced(switched.learner)
        want = _resolved(eager.learner.learn(batch))
        for other in (compiled, switched):
            assert _resolved(other.learner.learn(batch)) == pytest.approx(want, rel=2e-4, abs=2e-5)
    assert all(step.compiled for step in _steps(compiled.learner) if step.regions["step"].started)
    want_state = eager.learner.state_dict()
    _assert_same_state(compiled.learner.state_dict(), want_state)
    _assert_same_state(switched.learner.state_dict(), want_state)
    flat = lambda params: torch.cat([p.reshape(-1) for p in params])  # noqa: E731 - conv weights are channels last
    moved = flat(_steps(compiled.learner)[0].params)
    initial = flat(_steps(_algorithm(case).learner)[0].params)
    assert (moved - initial).abs().max() > 1e-4  # the updates moved the weights


@pytest.mark.parametrize(
    "case",
    [
        "ppo-discrete",
        "a2c-rmsprop",
        "dqn-double",
        "sac",
        "mappo",
        pytest.param("ppo-impala-cnn", marks=pytest.mark.slow),
    ],
)
def test_with_gradients_averaged_between_regions_the_update_is_the_same(case: str) -> None:
    """With learner copies, the step is two regions (gradient, then clip and optimizer) with the
    all-reduce between them; averaging over one copy changes nothing, so it equals the eager update."""
    batches = _batches(_algorithm(case, compile=False), iterations=3)
    eager, compiled = _algorithm(case, compile=False), _algorithm(case, compile=False)
    averaged: list[int] = []

    class Sync:  # what a distribution policy installs: averages in place (one copy: leaves them as they are)
        def __call__(self, parameters: Any) -> None:
            raise AssertionError("the steps average through mean_")

        def mean_(self, tensors: list[torch.Tensor]) -> None:
            averaged.append(len(tensors))

    for learner in (eager.learner, compiled.learner):
        learner.grad_sync = Sync()
    _compile_traced(compiled.learner)
    for batch in batches:
        assert _resolved(compiled.learner.learn(batch)) == pytest.approx(
            _resolved(eager.learner.learn(batch)), rel=2e-4, abs=2e-5
        )
    assert all(step.regions["grad"].ready for step in _steps(compiled.learner) if step.regions["grad"].started)
    assert averaged and len(set(averaged)) <= len(_steps(compiled.learner)) + 2  # gradients (and statistics)
    _assert_same_state(compiled.learner.state_dict(), eager.learner.state_dict())


@pytest.mark.parametrize(
    "case", [pytest.param(case, marks=pytest.mark.slow) if case in SLOW_CASES else case for case in ALGORITHMS]
)
def test_each_region_is_one_graph_without_a_break_or_a_host_sync(case: str) -> None:
    algorithm = _algorithm(case, compile=False)
    batch = _batches(_algorithm(case, compile=False), iterations=3)[-1]
    calls: list[tuple[GradientStep, tuple[Any, ...]]] = []
    for name, value in list(vars(algorithm.learner).items()):  # each step records its batches
        if isinstance(value, GradientStep):
            setattr(algorithm.learner, name, _Recording(value, calls))
    _resolved(algorithm.learner.learn(batch))
    assert calls
    for step, args in {id(s): (s, a) for s, a in calls}.values():
        arguments = step.arguments(*args)
        explanation = torch._dynamo.explain(step.regions["step"].fn)(*arguments)
        assert explanation.graph_count == 1 and explanation.graph_break_count == 0, explanation.break_reasons
        with torch.no_grad(), _tracing_flag(), SyncCounter() as counter:
            step.regions["step"].fn(*step.arguments(*args))
        assert counter.ops > 10 and counter.syncs == []


@contextmanager
def _tracing_flag() -> Iterator[None]:
    """What the region's tracer holds while it traces (``torch.compiler.is_compiling()``), under
    which torch's functional optimizers take their tensor-only path."""
    before = torch.compiler._is_compiling_flag
    torch.compiler._is_compiling_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag = before


class _Recording:
    """A learner's ``GradientStep`` that records the batches it is called with."""

    def __init__(self, step: GradientStep, calls: list[tuple[GradientStep, tuple[Any, ...]]]) -> None:
        self.step, self.calls = step, calls

    def __call__(self, *batch: Any, **kw: Any) -> Any:
        self.calls.append((self.step, batch))
        return self.step(*batch, **kw)


# -- the pieces: clip, optimizers, the option ----------------------------------------------------------
@pytest.mark.parametrize("scale", [0.1, 10.0])
def test_clip_grad_norm_follows_torchs_rule(scale: float) -> None:
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(5, 3, generator=g) * scale, torch.randn(7, generator=g) * scale]
    params = [torch.nn.Parameter(torch.zeros_like(t)) for t in grads]
    for p, grad in zip(params, grads):
        p.grad = grad.clone()
    want = torch.nn.utils.clip_grad_norm_(params, 1.0)
    got = clip_grad_norm_(grads, 1.0)
    torch.testing.assert_close(got, want)
    for p, grad in zip(params, grads):
        torch.testing.assert_close(grad, p.grad)
    assert (got > 1.0) == (scale > 1)  # one case clips, the other leaves the gradients as they were
    assert torch.linalg.vector_norm(torch.cat([t.reshape(-1) for t in grads])) <= 1.0 + 1e-5


OPTIMIZERS: dict[str, Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]] = {
    "adam": lambda p: torch.optim.Adam(p, lr=3e-3, eps=1e-5),
    "adam-fused-amsgrad-decay": lambda p: torch.optim.Adam(p, lr=3e-3, amsgrad=True, weight_decay=0.1, fused=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.05),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=7e-4, alpha=0.99, eps=1e-5),
    "rmsprop-centred-momentum": lambda p: torch.optim.RMSprop(p, lr=7e-4, centered=True, momentum=0.9),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_compiled_step_takes_torchs_own_optimizer_with_its_options(name: str) -> None:
    """Eager steps through ``optimizer.step()`` and traced ones through torch's functional form
    agree, with an annealed learning rate read at every call (never baked into the region)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(32, 4, generator=g), torch.randn(32, generator=g)
    nets = [torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    steps = []
    for net in nets:
        optimizer = OPTIMIZERS[name](list(net.parameters()))

        def loss(x: torch.Tensor, y: torch.Tensor, net: Any = net) -> tuple[torch.Tensor, torch.Tensor]:
            value = (net(x).squeeze(-1) - y).square().mean()
            return value, value.detach()

        steps.append(GradientStep(net, optimizer, loss, max_grad_norm=0.5, compile=False))
    _compile_traced_step(steps[1])
    for i in range(6):
        for step in steps:
            step.optimizer.param_groups[0]["lr"] *= 0.8  # annealed between calls
        torch.testing.assert_close(steps[1](x, y), steps[0](x, y), atol=1e-6, rtol=1e-5)
        assert steps[1].compiled, i
    for a, b in zip(*(step.params for step in steps)):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    _assert_same_state(steps[1].optimizer.state_dict(), steps[0].optimizer.state_dict())


def _compile_traced_step(step: GradientStep) -> None:
    for region in step.regions.values():
        region.option, region.started, region.backend = "true", False, "traced"


def test_an_optimizer_without_a_functional_form_runs_eagerly_and_says_so(capsys: pytest.CaptureFixture) -> None:
    net = torch.nn.Linear(3, 1)
    step = GradientStep(
        net, torch.optim.SGD(net.parameters(), lr=0.1), lambda x: (net(x).sum(), net(x).sum().detach()), compile=True
    )
    before = net.weight.detach().clone()
    step(torch.ones(2, 3))
    assert not step.compiled and not torch.equal(net.weight, before)  # the eager step ran
    assert "could not be built (a compiled step takes one of Adam, AdamW, RMSprop, not SGD)" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["yes", 1, "reduce-overhead", None])
def test_a_bad_compile_option_names_the_choices(value: Any) -> None:
    with pytest.raises(ConfigError, match="auto, true, false"):
        PPOConfig(compile=value).validate()


def test_the_compile_option_reads_yaml_booleans() -> None:
    assert [compile_option(v) for v in (True, False, "auto", "true", "false")] == [
        "true",
        "false",
        "auto",
        "true",
        "false",
    ]


def test_msrl_compile_says_what_auto_means(monkeypatch: pytest.MonkeyPatch) -> None:
    from msrl.rl import CompiledRegion

    monkeypatch.setenv("MSRL_COMPILE", "false")
    assert CompiledRegion(lambda x: x, "auto").option == "false"
    assert CompiledRegion(lambda x: x, True).option == "true"  # an explicit choice stands
    monkeypatch.setenv("MSRL_COMPILE", "sometimes")
    with pytest.raises(ConfigError, match="MSRL_COMPILE must be one of: auto, true, false"):
        CompiledRegion(lambda x: x, "auto")
