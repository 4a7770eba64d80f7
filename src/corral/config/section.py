"""Typed access to one TOML table: every key read is checked and remembered, so an
unknown or ill-typed key is a ConfigError that names it (``partitions[1].max_time:
...``) and a typo never silently changes behaviour."""

from __future__ import annotations

from typing import Any

from corral import hostlist
from corral.errors import ConfigError, CorralError
from corral.slurmfmt import parse_duration


class Section:
    """Typed access to one TOML table that remembers which keys were read."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a table, got {type(data).__name__}")
        self.data: dict[str, Any] = data
        self.where = where
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def get(self, name: str, kind: type | tuple[type, ...], default: Any) -> Any:
        self.used.add(name)
        if name not in self.data:
            return default
        value = self.data[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and kind is not bool:
            raise ConfigError(f"{self.key(name)}: expected {kind_name(kind)}, got a boolean")
        if not isinstance(value, kind):
            raise ConfigError(
                f"{self.key(name)}: expected {kind_name(kind)}, got {type(value).__name__}"
            )
        return value

    def positive(self, name: str, default: float, *, allow_zero: bool = True) -> Any:
        value = self.get(name, (int, float) if isinstance(default, float) else int, default)
        if value < 0 or (value == 0 and not allow_zero):
            raise ConfigError(f"{self.key(name)}: must be {'>= 0' if allow_zero else '> 0'}")
        return value

    def port(self, name: str, default: int) -> int:
        value: int = self.get(name, int, default)
        if not 0 <= value <= 65535:
            raise ConfigError(f"{self.key(name)}: {value} is not a TCP port")
        return value

    def duration(self, name: str, default: int) -> int:
        self.used.add(name)
        if name not in self.data:
            return default
        value = self.data[name]
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 0:
                raise ConfigError(f"{self.key(name)}: a duration in seconds must be >= 0")
            return value
        if not isinstance(value, str):
            raise ConfigError(f"{self.key(name)}: expected a Slurm time string like '1-00:00:00'")
        try:
            return parse_duration(value)
        except CorralError as exc:
            raise ConfigError(f"{self.key(name)}: {exc}") from None

    def strings(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.get(name, (list, str), list(default))
        if isinstance(value, str):
            value = [value]
        if not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{self.key(name)}: expected a list of strings")
        return tuple(value)

    def hostlist(self, name: str, *, required: bool) -> tuple[str, ...]:
        self.used.add(name)
        if name not in self.data:
            if required:
                raise ConfigError(f"{self.key(name)}: missing (a hostlist such as 'node[01-04]')")
            return ()
        value = self.data[name]
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        if not isinstance(value, str):
            raise ConfigError(f"{self.key(name)}: expected a hostlist string")
        try:
            names = hostlist.expand(value)
        except CorralError as exc:
            raise ConfigError(f"{self.key(name)}: {exc}") from None
        if not names:
            raise ConfigError(f"{self.key(name)}: empty hostlist")
        return tuple(names)

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise ConfigError(f"{self.key(unknown[0])}: unknown key")


def kind_name(kind: type | tuple[type, ...]) -> str:
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "a boolean",
        list: "a list",
        dict: "a table",
    }
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)
