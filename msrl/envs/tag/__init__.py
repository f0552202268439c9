"""Tag-v0 (taggers chase runners), every form of it in this folder: ``_base`` (what every
backend reads: the rules' constants, the groups and spaces, the chunking of pairwise work),
``_numpy`` (the NumPy physics, and ``Tag``, the class that joins the backends; its docstring
states the rules), ``_torch`` (the torch physics) and ``tag.cu`` (its CUDA C kernels, a data
file that ``fragments`` builds).  ``REGISTRATION`` is its one entry in ``msrl.envs``'s registry."""

from pathlib import Path

from msrl.envs._registration import EnvRegistration, public_names

REGISTRATION = EnvRegistration(
    "Tag-v0",
    env="msrl.envs.tag._numpy:Tag",
    kernel_source=Path(__file__).with_name("tag.cu"),
)

_NAMES = {"NumpyTag": "_numpy", "Tag": "_numpy", "nearest": "_numpy", "NearestOthers": "_torch", "TorchTag": "_torch"}
_NAMES.update(dict.fromkeys(("CHUNK_BYTES", "SORT_MAX_AGENTS", "TWO_PI", "TagBase", "env_chunks"), "_base"))
__getattr__ = public_names(__name__, _NAMES)

__all__ = ["REGISTRATION", *_NAMES]
