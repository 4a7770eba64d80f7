"""A job step (``Step``, its ``StepNode`` placements and ``StepSpec``) and a step's
live figures per node (``StepStat``, ``NodeUsage``: GetStepStats)."""

from __future__ import annotations

from client.views.usage import LiveUsage
from client.views.values import as_float, as_int, as_str

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.wire import json_types as t


class StepNode:
    """A StepNode of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.StepNode) -> None:
        self.raw = raw

    @property
    def node(self) -> str:
        return as_str(self.raw.get("node"))

    @property
    def address(self) -> str:
        return as_str(self.raw.get("address"))

    @property
    def node_id(self) -> int:
        return as_int(self.raw.get("nodeId"))

    @property
    def ranks(self) -> list[int]:
        return list(self.raw.get("ranks") or ())

    @property
    def gpu_indices(self) -> list[int]:
        return list(self.raw.get("gpuIndices") or ())

    @property
    def cpus(self) -> int:
        return as_int(self.raw.get("cpus"))

    @property
    def stream_address(self) -> str:
        return as_str(self.raw.get("streamAddress"))


class StepSpec:
    """A StepSpec of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.StepSpec) -> None:
        self.raw = raw

    @property
    def job_id(self) -> int:
        return as_int(self.raw.get("jobId"))

    @property
    def name(self) -> str:
        return as_str(self.raw.get("name"))

    @property
    def num_nodes(self) -> int:
        return as_int(self.raw.get("numNodes"))

    @property
    def ntasks(self) -> int:
        return as_int(self.raw.get("ntasks"))

    @property
    def ntasks_per_node(self) -> int:
        return as_int(self.raw.get("ntasksPerNode"))

    @property
    def cpus_per_task(self) -> int:
        return as_int(self.raw.get("cpusPerTask"))

    @property
    def gpus_per_task(self) -> int:
        return as_int(self.raw.get("gpusPerTask"))

    @property
    def nodelist(self) -> str:
        return as_str(self.raw.get("nodelist"))

    @property
    def exclude(self) -> str:
        return as_str(self.raw.get("exclude"))

    @property
    def argv(self) -> list[str]:
        return list(self.raw.get("argv") or ())

    @property
    def submit_line(self) -> str:
        return as_str(self.raw.get("submitLine"))


class Step:
    """A Step of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.Step) -> None:
        self.raw = raw

    @property
    def state_name(self) -> str:
        """'RUNNING', 'COMPLETED', ... (the enum's name without its prefix)."""
        return (as_str(self.raw.get("state")) or "JOB_STATE_PENDING").removeprefix("JOB_STATE_")

    @property
    def job_id(self) -> int:
        return as_int(self.raw.get("jobId"))

    @property
    def step_id(self) -> int:
        return as_int(self.raw.get("stepId"))

    @property
    def name(self) -> str:
        return as_str(self.raw.get("name"))

    @property
    def state(self) -> str:
        return as_str(self.raw.get("state"))

    @property
    def start_time(self) -> float:
        return as_float(self.raw.get("startTime"))

    @property
    def reason(self) -> str:
        """A node's refusal to start it (a container not made), else empty."""
        return as_str(self.raw.get("reason"))

    @property
    def end_time(self) -> float:
        return as_float(self.raw.get("endTime"))

    @property
    def exit_code(self) -> int:
        return as_int(self.raw.get("exitCode"))

    @property
    def exit_signal(self) -> int:
        return as_int(self.raw.get("exitSignal"))

    @property
    def nodelist(self) -> str:
        return as_str(self.raw.get("nodelist"))

    @property
    def ntasks(self) -> int:
        return as_int(self.raw.get("ntasks"))

    @property
    def nodes(self) -> list[StepNode]:
        return [StepNode(x) for x in self.raw.get("nodes") or ()]

    @property
    def spec(self) -> StepSpec:
        return StepSpec(self.raw.get("spec") or {})


class StepStat:
    """A StepStat of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.StepStat) -> None:
        self.raw = raw

    @property
    def step(self) -> str:
        return as_str(self.raw.get("step"))

    @property
    def ntasks(self) -> int:
        return as_int(self.raw.get("ntasks"))

    @property
    def nodes(self) -> list[NodeUsage]:
        return [NodeUsage(x) for x in self.raw.get("nodes") or ()]


class NodeUsage:
    """A NodeUsage of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.NodeUsage) -> None:
        self.raw = raw

    @property
    def node(self) -> str:
        return as_str(self.raw.get("node"))

    @property
    def live(self) -> LiveUsage:
        return LiveUsage(self.raw.get("live") or {})
