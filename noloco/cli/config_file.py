"""``--config FILE``: a command's flags read from a TOML file (the standard library's ``tomllib``), the command
line winning. A key is a flag's name with ``_`` for ``-`` (``outer_steps = 10`` is ``--outer-steps 10``), at
the top level of the file; its value has the flag's type (an integer, a number, a string, true or false) and,
where the flag has choices, one of them. Flags that act on one invocation (``--resume``, ``--print-config``,
...) are not settings and are refused in a file. An unknown key, a value of another type and a file that is
not TOML are bad input (ConfigError, exit 2, one line naming the file and the key); a file that cannot be
read is an environment fault (DataError, exit 3).
"""

from __future__ import annotations

import argparse

from noloco.infra.checks import did_you_mean
from noloco.infra.errors import ConfigError, DataError
from noloco.infra.files import read_regular_bytes

#: the most bytes a --config file may hold (a file of every flag is about 2 kB)
CONFIG_BYTES = 2**20
#: the names other trainers (nanoGPT, Hugging Face, torchtitan) give to a setting, for the nearest-name hint
ALIASES = {"learning_rate": "lr", "batch_size": "batch", "block_size": "ctx", "seq_len": "ctx", "context": "ctx",
           "context_length": "ctx", "n_layer": "layers", "num_layers": "layers", "num_hidden_layers": "layers",
           "n_head": "heads", "num_heads": "heads", "num_attention_heads": "heads", "n_embd": "width",
           "hidden_size": "width", "d_model": "width", "num_replicas": "replicas", "world_size": "replicas",
           "local_steps": "inner_steps", "sync_every": "inner_steps", "outer_lr": "beta", "outer_momentum": "alpha",
           "min_lr": "min_lr_frac", "warmup_steps": "warmup", "grad_clip": "clip", "max_grad_norm": "clip",
           "model_size": "size"}


def read_toml(path) -> dict:
    """The TOML document in ``path``."""
    import tomllib

    try:  # a regular file of a settings file's size: a named pipe would block, /dev/zero fill the memory
        text = read_regular_bytes(path, limit=CONFIG_BYTES)
    except OSError as err:
        raise DataError(f"--config {path}: cannot be read ({err.strerror or type(err).__name__})") from None
    try:
        return tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"--config {path}: not a TOML file ({' '.join(str(err).split())})") from None


def _expected(action: argparse.Action) -> tuple[type | tuple, str]:
    """The TOML types a flag's value may have, and their name for an error."""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return bool, "true or false"
    kind = action.type or str
    if kind is int:
        return int, "an integer"
    if kind is float:
        return (int, float), "a number"
    return str, "a string"


def file_values(path, actions: list[argparse.Action], command_only: tuple[str, ...]) -> dict:
    """``{dest: value}`` of the file, each key a flag among ``actions`` (not in ``command_only``), each value
    of the flag's type and among its choices (ints for floats become floats)."""
    flags = {a.dest: a for a in actions if a.option_strings and a.dest not in command_only}
    values = {}
    for key, value in read_toml(path).items():
        action = flags.get(key)
        if action is None:
            if key in command_only:
                raise ConfigError(f"--config {path}: {key!r} acts on one command, it is not a setting of the run; "
                                  f"give --{key.replace('_', '-')} on the command line")
            raise ConfigError(f"--config {path}: unknown key {key!r}{did_you_mean(key, flags, ALIASES)}"
                              "; a key is a flag's name with _ for - (outer_steps = 10)")
        types, name = _expected(action)
        if isinstance(value, bool) != (types is bool) or not isinstance(value, types):
            raise ConfigError(f"--config {path}: {key} = {value!r} is {_toml_type(value)}; expected {name}")
        if action.choices is not None and value not in action.choices:
            raise ConfigError(f"--config {path}: {key} = {value!r} is not allowed; allowed: "
                              f"{', '.join(map(str, action.choices))}")
        values[key] = float(value) if types == (int, float) else value
    return values


def _toml_type(value) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "a table",
            list: "an array"}.get(type(value), f"a {type(value).__name__}")


def merge(args: argparse.Namespace, path, actions: list[argparse.Action], command_only: tuple[str, ...]) -> dict:
    """The file's values set on ``args`` where the command line gave nothing (None, or False for an on/off
    flag, which the command line can only turn on); the values taken, ``{dest: value}``."""
    taken = {}
    for key, value in file_values(path, actions, command_only).items():
        if getattr(args, key, None) in (None, False):
            setattr(args, key, value)
            taken[key] = value
    return taken
