"""Scheduling policy: ``[[partitions]]``, ``[scheduler]`` and ``[priority]``."""

from __future__ import annotations

from dataclasses import dataclass

from corral.config.power import suspend_time
from corral.config.section import Section
from corral.errors import ConfigError
from corral.slurmfmt import UNLIMITED


@dataclass(frozen=True)
class PartitionConfig:
    name: str
    nodes: tuple[str, ...]
    default: bool = False
    state: str = "UP"
    max_time_s: int = UNLIMITED
    default_time_s: int = UNLIMITED  # UNLIMITED here means "use max_time"
    max_nodes: int = 0
    priority_tier: int = 1
    allow_accounts: tuple[str, ...] = ()
    allow_groups: tuple[str, ...] = ()  # Unix groups whose members may use it; empty: all
    elastic: bool = False  # its jobs with -N MIN-MAX are --elastic (docs/reliability.md)
    # its last N idle nodes only replace the failed nodes of requeued jobs (hot spares)
    spare_nodes: int = 0
    suspend_time_s: int | None = None  # power saving: [power]'s suspend_time for its nodes


@dataclass(frozen=True)
class SchedulerConfig:
    backfill: bool = True
    reserve_depth: int = 1  # 1: EASY backfill; large: conservative
    forecast_depth: int = 100  # further blocked jobs that get an expected start
    # of those, how many (in priority order) hold their expected slot so that the ones
    # behind are forecast after them; forecasts only, never a start (docs/simulator.md)
    stack_forecasts: int = 0  # opt-in: 16 cuts the forecasts' p90, triples a deep pass
    # "pack" (best fit), "firstfit", "frag" (best fit, time- and fragmentation-aware),
    # "fgd" (least fragmentation first: ATC'23's rule) or "random"
    placement: str = "pack"
    kill_invalid_depend: bool = False  # cancel jobs whose dependency can never be met
    max_array_size: int = 1001  # Slurm's MaxArraySize: array task ids stay below it
    # plan backfill and forecasts with run times predicted from each user's history
    # (false: by time limits only); jobs are always killed at their own limits
    predict: bool = True
    backfill_order: str = (
        "shortest"  # backfill candidates: "shortest" predicted first, or "priority"
    )
    # pending jobs that cannot start one pass tries in full (Slurm's bf_max_job_test);
    # starts, and jobs of a class that already failed in the pass, are not tries; 0: none
    max_job_test: int = 500
    # decide a new job at submit against the last plan's reservations (sched/quick.py)
    # when only submits happened since that pass, instead of waiting for the next one
    start_on_submit: bool = True
    # the job eligible longest, once past this, goes first and gets the reservation,
    # kept by limits (the starvation guard, docs/simulator.md); 0: off
    starvation_guard_s: int = 24 * 3600
    # Slurm's PreemptType=preempt/qos with its PreemptMode: "off" (preempt/none),
    # "requeue" or "cancel" (what a preempted job of a QOS without its own mode gets)
    preempt_mode: str = "off"


@dataclass(frozen=True)
class PriorityConfig:
    # the defaults are the policy measured best in replays (docs/simulator.md): age
    # strong enough to overtake any fair-share gap within days, no job-size factor
    weight_age: int = 20000
    weight_fairshare: int = 10000
    weight_job_size: int = 0
    weight_partition: int = 1000
    weight_qos: int = 1000
    max_age_s: int = 7 * 86400
    favor_small: bool = False
    decay_half_life_s: int = 7 * 86400
    # what one second of a resource costs in fair-share usage (TRES billing weights)
    tres_weights: tuple[tuple[str, float], ...] = (("cpu", 1.0), ("gpu", 10.0), ("mem_gb", 0.0))

    def weight(self, tres: str) -> float:
        return dict(self.tres_weights).get(tres, 0.0)


def parse_partition(sec: Section, known_nodes: set[str]) -> PartitionConfig:
    name = sec.get("name", str, "")
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"{sec.key('name')}: a partition needs a name of letters, digits, - or _")
    state = sec.get("state", str, "UP").upper()
    if state not in ("UP", "DOWN", "DRAIN", "INACTIVE"):
        raise ConfigError(f"{sec.key('state')}: must be UP, DOWN, DRAIN or INACTIVE")
    nodes = sec.hostlist("nodes", required=True)
    unknown = [n for n in nodes if n not in known_nodes]
    if unknown:
        raise ConfigError(f"{sec.key('nodes')}: {unknown[0]!r} is not in any [[nodes]] entry")
    cfg = PartitionConfig(
        name=name,
        nodes=nodes,
        default=sec.get("default", bool, False),
        state=state,
        max_time_s=sec.duration("max_time", UNLIMITED),
        default_time_s=sec.duration("default_time", UNLIMITED),
        max_nodes=sec.positive("max_nodes", 0),
        priority_tier=sec.positive("priority_tier", 1),
        allow_accounts=sec.strings("allow_accounts", ()),
        allow_groups=sec.strings("allow_groups", ()),
        elastic=sec.get("elastic", bool, False),
        spare_nodes=sec.positive("spare_nodes", 0),
        suspend_time_s=suspend_time(sec),
    )
    sec.done()
    return cfg


def parse_scheduler(sec: Section) -> SchedulerConfig:
    d = SchedulerConfig()
    placement = sec.get("placement", str, d.placement)
    if placement not in ("pack", "firstfit", "frag", "fgd", "random"):
        raise ConfigError(f"{sec.key('placement')}: must be pack, firstfit, frag, fgd or random")
    order = sec.get("backfill_order", str, d.backfill_order)
    if order not in ("shortest", "priority"):
        raise ConfigError(f"{sec.key('backfill_order')}: must be shortest or priority")
    preempt_mode = sec.get("preempt_mode", str, d.preempt_mode)
    if preempt_mode not in ("off", "requeue", "cancel"):
        raise ConfigError(f"{sec.key('preempt_mode')}: must be off, requeue or cancel")
    cfg = SchedulerConfig(
        backfill=sec.get("backfill", bool, d.backfill),
        reserve_depth=sec.positive("reserve_depth", d.reserve_depth),
        forecast_depth=sec.positive("forecast_depth", d.forecast_depth),
        stack_forecasts=sec.positive("stack_forecasts", d.stack_forecasts),
        placement=placement,
        kill_invalid_depend=sec.get("kill_invalid_depend", bool, d.kill_invalid_depend),
        max_array_size=sec.positive("max_array_size", d.max_array_size, allow_zero=False),
        predict=sec.get("predict", bool, d.predict),
        backfill_order=order,
        max_job_test=sec.positive("max_job_test", d.max_job_test),
        start_on_submit=sec.get("start_on_submit", bool, d.start_on_submit),
        starvation_guard_s=sec.duration("starvation_guard", d.starvation_guard_s),
        preempt_mode=preempt_mode,
    )
    sec.done()
    return cfg


def parse_priority(sec: Section) -> PriorityConfig:
    d = PriorityConfig()
    raw_tres = sec.get("tres_weights", dict, dict(d.tres_weights))
    tres: dict[str, float] = dict(d.tres_weights)
    for key, value in raw_tres.items():
        if key not in ("cpu", "gpu", "mem_gb"):
            raise ConfigError(f"{sec.key('tres_weights')}.{key}: unknown TRES (cpu, gpu, mem_gb)")
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{sec.key('tres_weights')}.{key}: must be a number >= 0")
        tres[key] = float(value)
    cfg = PriorityConfig(
        weight_age=sec.positive("weight_age", d.weight_age),
        weight_fairshare=sec.positive("weight_fairshare", d.weight_fairshare),
        weight_job_size=sec.positive("weight_job_size", d.weight_job_size),
        weight_partition=sec.positive("weight_partition", d.weight_partition),
        weight_qos=sec.positive("weight_qos", d.weight_qos),
        max_age_s=sec.duration("max_age", d.max_age_s),
        favor_small=sec.get("favor_small", bool, d.favor_small),
        decay_half_life_s=sec.duration("decay_half_life", d.decay_half_life_s),
        tres_weights=tuple(sorted(tres.items())),
    )
    sec.done()
    for key in ("max_age", "decay_half_life"):
        if getattr(cfg, f"{key}_s") <= 0:
            raise ConfigError(f"{sec.key(key)}: must be a positive duration")
    return cfg
