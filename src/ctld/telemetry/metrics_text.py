"""The Prometheus text format, written fast where the series are many.

Per node and per GPU, a 1,000-node cluster exports ~50,000 series; prometheus_client's
exposition spends ~40 µs on each (label dicts, escaping, one sample object each),
~2 s of ctld's event loop per scrape. ``PerNodeText`` writes those families as text
with each node's and GPU's label string made once, and ``exposition`` writes every
family (the few others through their samples). bench/metrics_cost.py measures it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from corral.wire import corral_pb2 as pb

if TYPE_CHECKING:
    from ctld.control.cluster import Cluster
    from ctld.model.nodes import NodeRecord

MIB = 1024 * 1024
INF = float("inf")


def node_state(node: NodeRecord) -> str:
    return pb.NodeState.Name(node.state).removeprefix("NODE_STATE_")  # type: ignore[arg-type]


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Prerendered(Metric):
    """A family whose samples are already text (``text``: its sample lines)."""

    def __init__(self, name: str, documentation: str, typ: str, text: str) -> None:
        super().__init__(name, documentation, typ)
        self.text = text


def _value(v: float) -> str:
    if v == 1:
        return "1.0"
    if v == 0:
        return "0.0"
    if v != v:
        return "NaN"
    if v in (INF, -INF):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


class PerNodeText:
    def __init__(self) -> None:
        self.node_labels: dict[str, str] = {}
        self.gpu_labels: dict[tuple[str, int], str] = {}

    def node(self, name: str) -> str:
        got = self.node_labels.get(name)
        if got is None:
            got = self.node_labels[name] = f'{{node="{_escape(name)}"}} '
        return got

    def gpu(self, name: str, index: int) -> str:
        got = self.gpu_labels.get((name, index))
        if got is None:
            got = f'{{gpu="{index}",node="{_escape(name)}"}} '
            self.gpu_labels[(name, index)] = got
        return got

    def node_families(self, c: Cluster) -> Iterator[Metric]:
        names = (
            ("corral_node_healthy", "1 while a node takes jobs (not down, drained or failed)"),
            ("corral_node_cpus", "CPUs of a node"),
            ("corral_node_cpus_allocated", "CPUs allocated to jobs"),
            ("corral_node_memory_bytes", "Memory of a node"),
            ("corral_node_memory_allocated_bytes", "Memory allocated to jobs"),
            ("corral_node_gpus", "GPUs of a node"),
            ("corral_node_gpus_allocated", "GPUs given to jobs, whole or shared"),
        )
        lines: list[list[str]] = [[] for _ in names]
        states: list[str] = []
        for name, node in sorted(c.nodes.items()):
            res, lab = node.resources, self.node(name)
            states.append(
                f'corral_node_state{{node="{_escape(name)}",state="{node_state(node)}"}} 1.0\n'
            )
            values = (
                1 if node.schedulable else 0,
                res.cpus,
                node.alloc_cpus,
                res.memory_mb * MIB,
                node.alloc_mem_mb * MIB,
                len(res.gpus),
                node.gpus_in_use(),
            )
            for out, (metric, _), v in zip(lines, names, values, strict=True):
                out.append(f"{metric}{lab}{_value(float(v))}\n")
        yield Prerendered(
            "corral_node_state", "1 for each node's state now", "gauge", "".join(states)
        )
        for (metric, doc), out in zip(names, lines, strict=True):
            yield Prerendered(metric, doc, "gauge", "".join(out))

    def gpu_families(self, c: Cluster) -> Iterator[Metric]:
        alloc: list[str] = []
        util: list[str] = []
        used: list[str] = []
        total: list[str] = []
        healthy: list[str] = []
        live = c.state.live
        for name, node in sorted(c.nodes.items()):
            # a node that stopped answering has no figures now (its last ones are stale)
            status = live.gpus(name) if node.responding and not node.down else {}
            for gpu in node.resources.gpus:
                lab = self.gpu(name, gpu.index)
                held = gpu.index in node.alloc_gpus or gpu.index in node.alloc_shards
                alloc.append(f"corral_gpu_allocated{lab}{'1.0' if held else '0.0'}\n")
                total.append(f"corral_gpu_memory_bytes{lab}{_value(float(gpu.memory_mb * MIB))}\n")
                now = status.get(gpu.index)
                if now is not None:
                    util.append(f"corral_gpu_utilization_ratio{lab}{_value(now.util_pct / 100)}\n")
                    mem = _value(now.memory_used_mb * MIB)
                    used.append(f"corral_gpu_memory_used_bytes{lab}{mem}\n")
                # a GPU missing from its node's samples is lost; no samples yet: unknown
                if status:
                    ok = now is not None and not now.fault
                    healthy.append(f"corral_gpu_healthy{lab}{'1.0' if ok else '0.0'}\n")
        for name, doc, out in (
            ("corral_gpu_allocated", "1 while a GPU is given to a job (whole or shared)", alloc),
            ("corral_gpu_utilization_ratio", "GPU utilization, 0 to 1, as noded sampled it", util),
            ("corral_gpu_memory_used_bytes", "GPU memory in use, as noded sampled it", used),
            ("corral_gpu_memory_bytes", "GPU memory", total),
            (
                "corral_gpu_healthy",
                "1 unless noded found a fault on the GPU (XID, ECC, lost) or it stopped answering",
                healthy,
            ),
        ):
            yield Prerendered(name, doc, "gauge", "".join(out))


def _generic(metric: Metric) -> Iterable[str]:
    for s in metric.samples:
        if s.labels:
            labels = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(s.labels.items()))
            yield f"{s.name}{{{labels}}} {_value(s.value)}\n"
        else:
            yield f"{s.name} {_value(s.value)}\n"


def exposition(registry: CollectorRegistry) -> bytes:
    """The text format (0.0.4) of every family ``registry`` collects."""
    out: list[str] = []
    for metric in registry.collect():
        name = metric.name + ("_total" if metric.type == "counter" else "")
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {metric.type}\n")
        if isinstance(metric, Prerendered):
            out.append(metric.text)
        else:
            out.extend(_generic(metric))
    return "".join(out).encode()
