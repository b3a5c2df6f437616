"""One loader from YAML / plain dicts to frozen config dataclasses, and one `ConfigError`.

Why one: the trainer, Datashop and ablations each had their own dict-to-dataclass code, their own
check helper and their own error class (two outside `ZephyrError`), with three message styles.
Here `from_dict(cls, data, where)` builds any config dataclass from nested plain data by its type
hints, rejects unknown keys, and names the failing field by its path from the file:

    train.yaml: model.num_layers: expected an integer, got 'x'
    ablation.yaml: candidates[0]: unknown key(s) ['mixtrue']; MixtureSpec accepts [...]

Checks that need several fields stay in the dataclasses' ``__post_init__`` (so a config built in
code is checked too) and raise with `require(ok, message)` / `fail(where, message)`; `from_dict`
prefixes their messages with the file, so every error says where to look.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar

from zephyr.errors import ZephyrError

__all__ = ["ConfigError", "require", "fail", "from_dict", "to_dict", "apply_overrides", "load_yaml"]

T = TypeVar("T")


class ConfigError(ZephyrError, ValueError):
    """A configuration value that cannot work; the message names the field and says how to fix it."""


def require(ok: bool, message: str) -> None:
    """Raise `ConfigError(message)` unless `ok`."""
    if not ok:
        raise ConfigError(message)


def fail(where: str, message: str) -> NoReturn:
    """Raise `ConfigError` for the config part `where` (a class or field name)."""
    raise ConfigError(f"{where}: {message}")


def from_dict(cls: type[T], data: Any, where: str = "config", *, at: str = "") -> T:
    """Build the config dataclass `cls` from nested plain data (what YAML or JSON gives).

    Values are coerced by the fields' type hints (nested dataclasses, ``tuple[X, ...]``,
    ``tuple[A, B]``, ``dict[str, X]``, ``Literal``, optionals, int/float/bool/str); lists become
    tuples. Unknown keys are refused with the accepted ones. Every error is a `ConfigError` whose
    message starts with `where` (a file name, say; "" for none) and the path to the field; `at` is
    the path of `data` itself inside a bigger config (``"train"``, ``"stages[0]"``).
    """
    try:
        return _build(cls, data, at)
    except ConfigError as exc:
        if not where:
            raise
        raise ConfigError(f"{where}: {exc}") from None


def to_dict(config: Any) -> Any:
    """Plain nested data (tuples become lists) of a config dataclass: what `from_dict` reads back."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, Mapping):
        return {k: to_dict(v) for k, v in config.items()}
    if isinstance(config, list | tuple):
        return [to_dict(v) for v in config]
    return config


def apply_overrides(data: Mapping[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Apply ``a.b=value`` strings (value parsed as YAML) to nested plain data, returning a copy."""
    import yaml

    out = copy.deepcopy(dict(data))
    for item in overrides:
        key, sep, raw = item.partition("=")
        require(
            bool(sep) and bool(key), f"override {item!r} is not key=value; write e.g. optimizer.learning_rate=1e-3."
        )
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            require(isinstance(node, dict), f"override {item!r}: {part!r} is not a section.")
        node[parts[-1]] = yaml.safe_load(raw)
    return out


def load_yaml(path: str | Path, what: str = "config") -> dict[str, Any]:
    """The top-level mapping of a YAML (or JSON) file; `ConfigError` naming the file otherwise."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{what} file {path} does not exist; pass the path of a YAML {what}.") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    require(isinstance(data, dict), f"{path}: expected a YAML mapping at top level, got {type(data).__name__}.")
    return data


# ----------------------------------------------------------------------------------------- building
def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _build(cls: type, data: Any, path: str) -> Any:
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        got = f"{type(data).__name__} {data!r}"
        raise ConfigError(f"{path or 'top level'}: expected a mapping of {cls.__name__} fields, got {got}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(str(k) for k in set(data) - set(fields))
    if unknown:
        at = f"{path}: " if path else ""
        raise ConfigError(f"{at}unknown key(s) {unknown}; {cls.__name__} accepts {sorted(fields)}.")
    kwargs = {k: _coerce(v, hints[k], _join(path, k)) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        missing = [n for n, f in fields.items() if n not in kwargs and _required(f)]
        if missing:
            raise ConfigError(f"{path or cls.__name__}: missing required key(s) {missing} for {cls.__name__}") from None
        raise ConfigError(f"{path or cls.__name__}: {exc}") from None


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _expected(what: str, path: str, value: Any) -> ConfigError:
    return ConfigError(f"{path}: expected {what}, got {value!r}")


def _coerce(value: Any, hint: Any, path: str) -> Any:
    """Turn a YAML value into what the field's type hint asks for."""
    origin = typing.get_origin(hint)
    if hint is Any or hint is object:
        return value
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, path)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _coerce(value, option, path)
            except ConfigError as exc:
                errors.append(exc)
        if len(options) == 1 or value is None:
            raise errors[0] if value is not None else _expected(_name(hint), path, value)
        raise _expected(_name(hint), path, value)
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise _expected(f"one of {list(typing.get_args(hint))}", path, value)
        return value
    if origin in (dict, Mapping) or hint is dict:
        if not isinstance(value, Mapping):
            raise _expected("a mapping", path, value)
        args = typing.get_args(hint)
        value_hint = args[1] if len(args) == 2 else Any
        return {str(k): _coerce(v, value_hint, f"{path}.{k}") for k, v in value.items()}
    if origin is tuple or hint is tuple:
        args = typing.get_args(hint)
        if isinstance(value, str) or not isinstance(value, list | tuple):
            example = "[a, b, ...]" if not args or args[-1] is Ellipsis else f"a list of {len(args)} items"
            raise _expected(example, path, value)
        if args and args[-1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
        if args:
            if len(args) != len(value):
                raise _expected(f"{len(args)} items", path, value)
            return tuple(_coerce(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
        return tuple(value)
    if origin is list or hint is list:
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise _expected("a list", path, value)
        args = typing.get_args(hint)
        return [_coerce(v, args[0] if args else Any, f"{path}[{i}]") for i, v in enumerate(value)]
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise _expected("a number", path, value)
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise _expected("an integer", path, value)
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise _expected("true or false", path, value)
        return value
    if hint is str:
        if isinstance(value, bool):
            raise ConfigError(
                f"{path}: expected a string, got {value!r}: YAML reads unquoted yes/no/on/off/true/false as "
                "booleans; quote the value (e.g. 'No')"
            )
        if isinstance(value, int | float):
            return str(value)  # YAML reads 3 or 0.5 as numbers; a string field means their text
        if not isinstance(value, str):
            raise _expected("a string", path, value)
        return value
    return value


def _name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_name(a) for a in args)
    return getattr(hint, "__name__", str(hint))
