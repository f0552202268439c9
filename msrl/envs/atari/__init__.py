"""Atari 2600 games through ale-py's vector environment: ``ALE/<Game>-v5`` for every ROM ale-py
ships (``_env``: ``AtariEnv``, over ``ale_py.vector_env.AtariVectorEnv``, whose emulators step on
C++ threads).  ``pip install "msrl[atari]"`` installs ale-py; its ROMs come with it.
``REGISTRATION`` is the family's one entry in ``msrl.envs``'s registry."""

from msrl.envs._registration import EnvFamily, public_names

REGISTRATION = EnvFamily(
    r"ALE/(\w+)-v5", backend="ale", env="msrl.envs.atari._env:AtariEnv", example="ALE/<Game>-v5", threaded=True
)

__getattr__ = public_names(__name__, {"AtariEnv": "_env", "game_of": "_env"})

__all__ = ["REGISTRATION", "AtariEnv", "game_of"]
