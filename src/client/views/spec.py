"""A job's spec as ctld holds it (``Spec``): what was asked at submit."""

from __future__ import annotations

from client.views.values import as_int, as_str

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.wire import json_types as t


class Spec:
    """A JobSpec of a reply, read through typed properties."""

    __slots__ = ("raw",)

    def __init__(self, raw: t.JobSpec) -> None:
        self.raw = raw

    @property
    def array_task_count(self) -> int:
        """How many tasks ``--array`` names (0: not an array), as ctld typed it."""
        return as_int((self.raw.get("arrayTasks") or {}).get("count"))

    @property
    def name(self) -> str:
        return as_str(self.raw.get("name"))

    @property
    def work_dir(self) -> str:
        return as_str(self.raw.get("workDir"))

    @property
    def stdout_pattern(self) -> str:
        return as_str(self.raw.get("stdoutPattern"))

    @property
    def stderr_pattern(self) -> str:
        return as_str(self.raw.get("stderrPattern"))

    @property
    def stdin_path(self) -> str:
        return as_str(self.raw.get("stdinPath"))

    @property
    def partitions(self) -> list[str]:
        return list(self.raw.get("partitions") or ())

    @property
    def account(self) -> str:
        return as_str(self.raw.get("account"))

    @property
    def nodes_min(self) -> int:
        return as_int(self.raw.get("nodesMin"))

    @property
    def nodes_max(self) -> int:
        return as_int(self.raw.get("nodesMax"))

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
    def mem_per_node_mb(self) -> int:
        return as_int(self.raw.get("memPerNodeMb"))

    @property
    def mem_per_cpu_mb(self) -> int:
        return as_int(self.raw.get("memPerCpuMb"))

    @property
    def gpus(self) -> int:
        return as_int(self.raw.get("gpus"))

    @property
    def gpus_per_node(self) -> int:
        return as_int(self.raw.get("gpusPerNode"))

    @property
    def gpu_type(self) -> str:
        return as_str(self.raw.get("gpuType"))

    @property
    def time_limit_s(self) -> int:
        return as_int(self.raw.get("timeLimitS"))

    @property
    def hold(self) -> bool:
        return bool(self.raw.get("hold"))

    @property
    def dependency(self) -> str:
        return as_str(self.raw.get("dependency"))

    @property
    def nice(self) -> int:
        return as_int(self.raw.get("nice"))

    @property
    def exclusive(self) -> bool:
        return bool(self.raw.get("exclusive"))

    @property
    def nodelist(self) -> str:
        return as_str(self.raw.get("nodelist"))

    @property
    def exclude(self) -> str:
        return as_str(self.raw.get("exclude"))

    @property
    def comment(self) -> str:
        return as_str(self.raw.get("comment"))

    @property
    def requeue(self) -> bool:
        return bool(self.raw.get("requeue"))

    @property
    def submit_line(self) -> str:
        return as_str(self.raw.get("submitLine"))

    @property
    def submit_host(self) -> str:
        return as_str(self.raw.get("submitHost"))

    @property
    def argv(self) -> list[str]:
        return list(self.raw.get("argv") or ())

    @property
    def signal(self) -> str:
        return as_str(self.raw.get("signal"))

    @property
    def qos(self) -> str:
        return as_str(self.raw.get("qos"))

    @property
    def constraint(self) -> str:
        return as_str(self.raw.get("constraint"))

    @property
    def wckey(self) -> str:
        return as_str(self.raw.get("wckey"))

    @property
    def mail_type(self) -> str:
        return as_str(self.raw.get("mailType"))

    @property
    def mail_user(self) -> str:
        return as_str(self.raw.get("mailUser"))

    @property
    def command(self) -> str:
        return as_str(self.raw.get("command"))

    @property
    def reservation(self) -> str:
        return as_str(self.raw.get("reservation"))

    @property
    def gpus_per_task(self) -> int:
        return as_int(self.raw.get("gpusPerTask"))

    @property
    def allocation_only(self) -> bool:
        return bool(self.raw.get("allocationOnly"))

    @property
    def no_requeue(self) -> bool:
        return bool(self.raw.get("noRequeue"))

    @property
    def shards_per_node(self) -> int:
        return as_int(self.raw.get("shardsPerNode"))
