"""simple_spread_v3 (MPE's cooperative navigation), every form of it in this folder: ``_base``
(what every backend reads: the constants, the group and spaces), ``_numpy`` (the NumPy physics,
and ``SimpleSpread``, the class that joins the backends; its docstring states the rules) and
``_torch`` (the torch physics).  It has no kernels.  ``REGISTRATION`` is its one entry in
``msrl.envs``'s registry; its ``pettingzoo`` backend steps mpe2's original, under msrl's group
name ``agents``."""

from msrl.envs._registration import Backend, EnvRegistration, lazy, public_names

REGISTRATION = EnvRegistration(
    "simple_spread_v3",
    env="msrl.envs.simple_spread._numpy:SimpleSpread",
    adapters={
        "pettingzoo": Backend(
            lazy("msrl.envs._pettingzoo:PettingZooEnv", "mpe2.simple_spread_v3", group_names=(("agent", "agents"),))
        )
    },
)

__getattr__ = public_names(
    __name__,
    {
        "NumpySimpleSpread": "_numpy",
        "SimpleSpread": "_numpy",
        "SimpleSpreadBase": "_base",
        "TorchSimpleSpread": "_torch",
    },
)

__all__ = ["REGISTRATION", "NumpySimpleSpread", "SimpleSpread", "SimpleSpreadBase", "TorchSimpleSpread"]
