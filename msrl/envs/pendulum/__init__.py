"""Pendulum-v1, every form of it in this folder: ``_base`` (what every backend reads:
gymnasium's constants, ``g``, the spaces, the time limit), ``_numpy`` (the NumPy physics, and
``Pendulum``, the class that joins the backends), ``_torch`` (the torch physics) and
``pendulum.cu`` (its CUDA C kernels, a data file that ``fragments`` builds).
``REGISTRATION`` is its one entry in ``msrl.envs``'s registry."""

from pathlib import Path

from msrl.envs._registration import Backend, EnvRegistration, lazy, public_names

REGISTRATION = EnvRegistration(
    "Pendulum-v1",
    env="msrl.envs.pendulum._numpy:Pendulum",
    kernel_source=Path(__file__).with_name("pendulum.cu"),
    adapters={"gymnasium": Backend(lazy("msrl.envs._gymnasium:GymnasiumEnv", "Pendulum-v1"))},
)

__getattr__ = public_names(
    __name__, {"NumpyPendulum": "_numpy", "Pendulum": "_numpy", "PendulumBase": "_base", "TorchPendulum": "_torch"}
)

__all__ = ["REGISTRATION", "NumpyPendulum", "Pendulum", "PendulumBase", "TorchPendulum"]
