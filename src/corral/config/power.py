"""Power saving: ``[power]``, with Slurm's names and meaning (slurm.conf's SuspendProgram,
ResumeProgram, ResumeFailProgram, SuspendTime, SuspendTimeout, ResumeTimeout,
ResumeRate, SuspendRate, SuspendExcNodes, SuspendExcParts, and SlurmctldParameters'
idle_on_node_suspend). ``suspend_time`` may also be set per partition and per
``[[nodes]]`` entry (the node set's wins, then the partition's, then this one).

The programs get one argument, a Slurm hostlist (``node[01-04]``), as Slurm's do, so
an operator's existing scripts work unchanged; they run as ``program_user`` and are
killed past their timeout (the resume program's is ``resume_timeout``, the others'
``suspend_timeout``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from corral.config.section import Section
from corral.errors import ConfigError

NEVER = -1  # suspend_time: Slurm's INFINITE (the nodes are never suspended)


@dataclass(frozen=True)
class PowerConfig:
    suspend_program: str = ""  # given the hostlist of nodes to power down
    resume_program: str = ""  # given the hostlist of nodes to power up
    resume_fail_program: str = ""  # given the nodes that missed resume_timeout
    suspend_time_s: int = NEVER  # idle this long: powered down; NEVER: power saving off
    suspend_timeout_s: int = 30  # a node powering down is powered down after this
    resume_timeout_s: int = 60  # a node powering up must register within this
    resume_rate: int = 300  # nodes powered up per minute (0: no limit)
    suspend_rate: int = 60  # nodes powered down per minute (0: no limit)
    suspend_exc_nodes: tuple[str, ...] = ()  # never powered down
    suspend_exc_parts: tuple[str, ...] = ()  # their nodes never powered down
    idle_on_node_suspend: bool = False  # a powered-down node loses its DRAIN and DOWN
    program_user: str = ""  # who the programs run as ("": ctld's own user)
    idle_watts: float = 0.0  # what a node draws idle: the energy `corral report` counts
    powered_down_watts: float = 0.0  # what a powered-down node still draws (BMC, standby)

    @property
    def enabled(self) -> bool:
        """Whether any node can be powered down or up by ctld at all."""
        return bool(self.suspend_program or self.resume_program)


def suspend_time(sec: Section, name: str = "suspend_time") -> int | None:
    """A ``suspend_time`` key: seconds (or a Slurm time string), -1 / "INFINITE" for never;
    None where the key is absent (the next level's value applies)."""
    if name not in sec.data:
        sec.used.add(name)
        return None
    value = sec.data[name]
    if value == NEVER or (isinstance(value, str) and value.upper() in ("INFINITE", "NONE")):
        sec.used.add(name)
        return NEVER
    return sec.duration(name, NEVER)


def parse_power(sec: Section, known_nodes: set[str], partitions: set[str]) -> PowerConfig:
    d = PowerConfig()
    global_time = suspend_time(sec)
    cfg = PowerConfig(
        suspend_program=sec.get("suspend_program", str, d.suspend_program),
        resume_program=sec.get("resume_program", str, d.resume_program),
        resume_fail_program=sec.get("resume_fail_program", str, d.resume_fail_program),
        suspend_time_s=d.suspend_time_s if global_time is None else global_time,
        suspend_timeout_s=sec.duration("suspend_timeout", d.suspend_timeout_s),
        resume_timeout_s=sec.duration("resume_timeout", d.resume_timeout_s),
        resume_rate=sec.positive("resume_rate", d.resume_rate),
        suspend_rate=sec.positive("suspend_rate", d.suspend_rate),
        suspend_exc_nodes=sec.hostlist("suspend_exc_nodes", required=False),
        suspend_exc_parts=sec.strings("suspend_exc_parts", ()),
        idle_on_node_suspend=sec.get("idle_on_node_suspend", bool, d.idle_on_node_suspend),
        program_user=sec.get("program_user", str, d.program_user),
        idle_watts=sec.positive("idle_watts", d.idle_watts),
        powered_down_watts=sec.positive("powered_down_watts", d.powered_down_watts),
    )
    sec.done()
    for key in ("suspend_program", "resume_program", "resume_fail_program"):
        path = getattr(cfg, key)
        if path and not os.path.isabs(path):
            raise ConfigError(f"{sec.key(key)}: {path!r} must be an absolute path")
    if cfg.suspend_program and not cfg.resume_program:
        raise ConfigError(
            f"{sec.key('suspend_program')}: a node powered down needs a resume_program to wake it"
        )
    if cfg.resume_timeout_s <= 0 or cfg.suspend_timeout_s <= 0:
        raise ConfigError(f"{sec.where}: resume_timeout and suspend_timeout must be > 0")
    unknown = [n for n in cfg.suspend_exc_nodes if n not in known_nodes]
    if unknown:
        raise ConfigError(f"{sec.key('suspend_exc_nodes')}: {unknown[0]!r} is not a node")
    unknown = [p for p in cfg.suspend_exc_parts if p not in partitions]
    if unknown:
        raise ConfigError(f"{sec.key('suspend_exc_parts')}: {unknown[0]!r} is not a partition")
    if cfg.powered_down_watts > cfg.idle_watts and cfg.idle_watts:
        raise ConfigError(f"{sec.key('powered_down_watts')}: more than idle_watts")
    return cfg
