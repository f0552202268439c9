"""MinAtar's five games (Young and Tian, 2019) as ``MinAtar/<Game>-v1``: Asterix, Breakout,
Freeway, Seaquest and SpaceInvaders on 10x10 frames with one channel per kind of object, small
enough to learn from pixels in minutes on a CPU (``_env``: ``MinAtarEnv``).  ``pip install
"msrl[atari]"`` installs the ``minatar`` package beside ale-py.  ``REGISTRATION`` is the family's
one entry in ``msrl.envs``'s registry."""

from msrl.envs._registration import EnvFamily, public_names

REGISTRATION = EnvFamily(
    r"MinAtar/(\w+)-v1", backend="minatar", env="msrl.envs.minatar._env:MinAtarEnv", example="MinAtar/<Game>-v1"
)

__getattr__ = public_names(__name__, {"MinAtarEnv": "_env"})

__all__ = ["REGISTRATION", "MinAtarEnv"]
