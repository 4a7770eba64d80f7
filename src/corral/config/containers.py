"""``[containers]``: how noded runs Pyxis-style containers (docs/containers.md,
docs/admin-guide.md). ctld reads ``allowed_sources`` (a registry image refused at
submit where registries are not allowed); noded the rest."""

from __future__ import annotations

from dataclasses import dataclass

from corral.config.section import Section
from corral.containerspec import SOURCES, parse_mounts
from corral.errors import ConfigError, CorralError

#: the node feature a node reports when it can run containers (its runtime is there)
CONTAINER_FEATURE = "container"
DEFAULT_CACHE_SIZE = 50 * 1024**3
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


@dataclass(frozen=True)
class ContainersConfig:
    """What noded's container runtime reads (``""`` paths: under noded's spool_dir)."""

    runtime: str = "crun"  # the OCI runtime: a name looked up on PATH, or a path
    cache_dir: str = ""  # imported images, by digest; "": {spool_dir}/containers/cache
    cache_size_bytes: int = DEFAULT_CACHE_SIZE  # the cache's cap (least recently used go)
    data_dir: str = ""  # running and named containers; "": {spool_dir}/containers/data
    default_mounts: tuple[str, ...] = ()  # SRC:DST[:FLAGS], before the job's own mounts
    allow_registry_pulls: bool = True  # false: registry images from the cache only
    allowed_sources: tuple[str, ...] = SOURCES  # squashfs, oci-dir, archive, registry

    def cache_path(self, spool_dir: str) -> str:
        return self.cache_dir or f"{spool_dir.rstrip('/')}/containers/cache"

    def data_path(self, spool_dir: str) -> str:
        return self.data_dir or f"{spool_dir.rstrip('/')}/containers/data"


def parse_size_bytes(value: object, where: str) -> int:
    """A size in bytes: an integer, or a string with K, M, G or T (powers of 1024)."""
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = value, ""
    elif isinstance(value, str):
        text = value.strip().upper().removesuffix("IB").removesuffix("B")
        unit = text[-1:] if text[-1:] in _UNITS else ""
        digits = text[: len(text) - len(unit)].strip()
        if not digits.isdecimal():
            raise ConfigError(f"{where}: {value!r} is not a size (bytes, or 20G, 500M...)")
        number = int(digits)
    else:
        raise ConfigError(f"{where}: expected a size (bytes, or a string like '50G')")
    if number <= 0:
        raise ConfigError(f"{where}: must be > 0")
    return number * _UNITS[unit]


def parse_containers(sec: Section) -> ContainersConfig:
    d = ContainersConfig()
    runtime = sec.get("runtime", str, d.runtime).strip()
    cache_dir = sec.get("cache_dir", str, d.cache_dir)
    data_dir = sec.get("data_dir", str, d.data_dir)
    sec.used.add("cache_size")
    size = d.cache_size_bytes
    if "cache_size" in sec.data:
        size = parse_size_bytes(sec.data["cache_size"], sec.key("cache_size"))
    mounts = sec.strings("default_mounts", d.default_mounts)
    pulls = sec.get("allow_registry_pulls", bool, d.allow_registry_pulls)
    sources = sec.strings("allowed_sources", d.allowed_sources)
    sec.done()
    if not runtime or any(c.isspace() for c in runtime):
        raise ConfigError(f"{sec.key('runtime')}: {runtime!r} is not a program name or path")
    for key, path in (("cache_dir", cache_dir), ("data_dir", data_dir)):
        if path and not path.startswith("/"):
            raise ConfigError(f"{sec.key(key)}: {path!r} is not an absolute path")
    if cache_dir and data_dir and cache_dir.rstrip("/") == data_dir.rstrip("/"):
        raise ConfigError(f"{sec.key('data_dir')}: must differ from cache_dir")
    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        raise ConfigError(
            f"{sec.key('allowed_sources')}: {unknown[0]!r} is not an image source "
            f"({', '.join(SOURCES)})"
        )
    try:
        checked = tuple(parse_mounts(mounts)) if mounts else ()
    except CorralError as exc:
        raise ConfigError(f"{sec.key('default_mounts')}: {exc.message}") from None
    return ContainersConfig(
        runtime=runtime,
        cache_dir=cache_dir,
        cache_size_bytes=size,
        data_dir=data_dir,
        default_mounts=checked,
        allow_registry_pulls=pulls,
        allowed_sources=tuple(dict.fromkeys(sources)),
    )
