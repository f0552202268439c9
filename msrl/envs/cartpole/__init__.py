"""CartPole-v1, every form of it in this folder: ``_base`` (what every backend reads:
gymnasium's constants, the spaces, the time limit), ``_numpy`` (the NumPy physics, and
``CartPole``, the class that joins the backends), ``_torch`` (the torch physics) and
``cartpole.cu`` (its CUDA C kernels, a data file that ``fragments`` builds).
``REGISTRATION`` is its one entry in ``msrl.envs``'s registry."""

from pathlib import Path

from msrl.envs._registration import Backend, EnvRegistration, lazy, public_names

REGISTRATION = EnvRegistration(
    "CartPole-v1",
    env="msrl.envs.cartpole._numpy:CartPole",
    kernel_source=Path(__file__).with_name("cartpole.cu"),
    adapters={"gymnasium": Backend(lazy("msrl.envs._gymnasium:GymnasiumEnv", "CartPole-v1"))},
)

__getattr__ = public_names(
    __name__, {"CartPole": "_numpy", "CartPoleBase": "_base", "NumpyCartPole": "_numpy", "TorchCartPole": "_torch"}
)

__all__ = ["REGISTRATION", "CartPole", "CartPoleBase", "NumpyCartPole", "TorchCartPole"]
