"""A job of a reply (GetJobs, QueryAccounting, CreateStep): ``Job``, its node
allocations and its priority factors; its spec and steps are views of their own."""

from __future__ import annotations

from client.views.spec import Spec
from client.views.step import Step
from client.views.usage import Usage
from client.views.values import as_float, as_int, as_str

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.wire import json_types as t


class Allocation:
    """A NodeAllocation of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.NodeAllocation) -> None:
        self.raw = raw

    @property
    def node(self) -> str:
        return as_str(self.raw.get("node"))

    @property
    def cpus(self) -> int:
        return as_int(self.raw.get("cpus"))

    @property
    def mem_mb(self) -> int:
        return as_int(self.raw.get("memMb"))

    @property
    def gpu_indices(self) -> list[int]:
        return list(self.raw.get("gpuIndices") or ())


class Factors:
    """A PriorityFactors of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.PriorityFactors) -> None:
        self.raw = raw

    @property
    def age(self) -> float:
        return as_float(self.raw.get("age"))

    @property
    def fairshare(self) -> float:
        return as_float(self.raw.get("fairshare"))

    @property
    def job_size(self) -> float:
        return as_float(self.raw.get("jobSize"))

    @property
    def partition(self) -> float:
        return as_float(self.raw.get("partition"))

    @property
    def qos(self) -> float:
        return as_float(self.raw.get("qos"))

    @property
    def nice(self) -> int:
        return as_int(self.raw.get("nice"))


class Interruption:
    """An Interruption of a reply: one requeued run and what it cost."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.Interruption) -> None:
        self.raw = raw

    @property
    def cause(self) -> str:
        return as_str(self.raw.get("cause"))

    @property
    def time(self) -> float:
        return as_float(self.raw.get("time"))

    @property
    def lost_s(self) -> float:
        return as_float(self.raw.get("lostS"))

    @property
    def next_start(self) -> float:
        return as_float(self.raw.get("nextStart"))


#: Each wire state name met, as printed: several columns read it for every row.
_STATE_NAMES: dict[str, str] = {}


class Job:
    """A Job of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.Job) -> None:
        self.raw = raw

    @property
    def ref(self) -> str:
        """How Slurm names a job: ``123``, or ``120_3`` for task 3 of array 120."""
        if self.is_array_task:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.job_id)

    @property
    def is_array_task(self) -> bool:
        return "arrayTaskId" in self.raw

    @property
    def state_name(self) -> str:
        """'PENDING', 'RUNNING', ... (the enum's name without its prefix)."""
        raw = as_str(self.raw.get("state"))
        name = _STATE_NAMES.get(raw)
        if name is None:
            name = _STATE_NAMES[raw] = (raw or "JOB_STATE_PENDING").removeprefix("JOB_STATE_")
        return name

    @property
    def job_id(self) -> int:
        return as_int(self.raw.get("jobId"))

    @property
    def spec(self) -> Spec:
        return Spec(self.raw.get("spec") or {})

    @property
    def user(self) -> str:
        return as_str(self.raw.get("user"))

    @property
    def uid(self) -> int:
        return as_int(self.raw.get("uid"))

    @property
    def gid(self) -> int:
        return as_int(self.raw.get("gid"))

    @property
    def state(self) -> str:
        return as_str(self.raw.get("state"))

    @property
    def reason(self) -> str:
        return as_str(self.raw.get("reason"))

    @property
    def hold(self) -> str:
        return as_str(self.raw.get("hold"))

    @property
    def partition(self) -> str:
        return as_str(self.raw.get("partition"))

    @property
    def account(self) -> str:
        return as_str(self.raw.get("account"))

    @property
    def time_limit_s(self) -> int:
        return as_int(self.raw.get("timeLimitS"))

    @property
    def submit_time(self) -> float:
        return as_float(self.raw.get("submitTime"))

    @property
    def eligible_time(self) -> float:
        return as_float(self.raw.get("eligibleTime"))

    @property
    def start_time(self) -> float:
        return as_float(self.raw.get("startTime"))

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
    def allocations(self) -> list[Allocation]:
        return [Allocation(x) for x in self.raw.get("allocations") or ()]

    @property
    def nodelist(self) -> str:
        return as_str(self.raw.get("nodelist"))

    @property
    def num_nodes(self) -> int:
        return as_int(self.raw.get("numNodes"))

    @property
    def num_tasks(self) -> int:
        return as_int(self.raw.get("numTasks"))

    @property
    def num_cpus(self) -> int:
        return as_int(self.raw.get("numCpus"))

    @property
    def mem_mb(self) -> int:
        return as_int(self.raw.get("memMb"))

    @property
    def num_gpus(self) -> int:
        return as_int(self.raw.get("numGpus"))

    @property
    def priority(self) -> int:
        return as_int(self.raw.get("priority"))

    @property
    def cluster(self) -> str:
        return as_str(self.raw.get("cluster"))

    @property
    def batch_host(self) -> str:
        return as_str(self.raw.get("batchHost"))

    @property
    def stdout_path(self) -> str:
        return as_str(self.raw.get("stdoutPath"))

    @property
    def stderr_path(self) -> str:
        return as_str(self.raw.get("stderrPath"))

    @property
    def restart_count(self) -> int:
        return as_int(self.raw.get("restartCount"))

    @property
    def cancelled_by_uid(self) -> int | None:
        """Who cancelled it; None when not recorded (older records, or root's 0)."""
        value = self.raw.get("cancelledByUid")
        return None if value is None else as_int(value)

    @property
    def expected_start(self) -> float:
        return as_float(self.raw.get("expectedStart"))

    @property
    def forecast_nodes(self) -> str:
        return as_str(self.raw.get("forecastNodes"))

    @property
    def priority_factors(self) -> Factors:
        return Factors(self.raw.get("priorityFactors") or {})

    @property
    def qos(self) -> str:
        return as_str(self.raw.get("qos"))

    @property
    def array_job_id(self) -> int:
        return as_int(self.raw.get("arrayJobId"))

    @property
    def array_task_id(self) -> int:
        return as_int(self.raw.get("arrayTaskId"))

    @property
    def usage(self) -> Usage:
        return Usage(self.raw.get("usage") or {})

    @property
    def idle_gpus_since(self) -> float:
        return as_float(self.raw.get("idleGpusSince"))

    @property
    def interruptions(self) -> list[Interruption]:
        return [Interruption(x) for x in self.raw.get("interruptions") or ()]

    @property
    def first_start_time(self) -> float:
        return as_float(self.raw.get("firstStartTime"))

    @property
    def steps(self) -> list[Step]:
        return [Step(x) for x in self.raw.get("steps") or ()]
