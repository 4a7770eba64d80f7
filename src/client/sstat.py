"""sstat: what a running job's steps used so far, in Slurm's fields and layouts.

The figures are the nodes' last samples (each heartbeat carries them to ctld:
GetStepStats), per node rather than per task: a node's figure stands for its tasks,
its lowest rank names the task (MaxRSSTask). Disk I/O, pages, energy and CPU
frequency are not measured (0). Output is a pure function of the GetStepStats
replies (``format_stats``).
"""

from __future__ import annotations

import sys

from client.acctfields import AcctField, acct_lines
from client.common import client, run
from client.options import COUNT, FLAG, LIST, Option, OptionParser, answered
from client.views.step import StepStat
from client.views.usage import LiveUsage
from corral.errors import CorralError, InvalidJobId, InvalidOption
from corral.slurmfmt import format_elapsed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from corral.wire import json_types as t

PROG = "sstat"
STR, NUM = "s", "n"
# sstat's own table (its widths differ from sacct's), in Slurm's order (-e lists it)
_TABLE = """
AveCPU 10 s|AveCPUFreq 10 s|AveDiskRead 12 s|AveDiskWrite 12 s|AvePages 10 s|AveRSS 10 s|
AveVMSize 10 s|ConsumedEnergy 14 s|ConsumedEnergyRaw 17 n|JobID -12 s|MaxDiskRead 12 s|
MaxDiskReadNode 15 s|MaxDiskReadTask 15 n|MaxDiskWrite 12 s|MaxDiskWriteNode 16 s|
MaxDiskWriteTask 16 n|MaxPages 8 s|MaxPagesNode 12 s|MaxPagesTask 14 n|MaxRSS 10 s|
MaxRSSNode 10 s|MaxRSSTask 10 n|MaxVMSize 10 s|MaxVMSizeNode 14 s|MaxVMSizeTask 14 n|
MinCPU 10 s|MinCPUNode 10 s|MinCPUTask 10 n|Nodelist 20 s|NTasks 8 n|Pids 20 s|
ReqCPUFreq 10 s|ReqCPUFreqMin 13 s|ReqCPUFreqMax 13 s|ReqCPUFreqGov 13 s|
TRESUsageInAve 14 s|TRESUsageInMax 14 s|TRESUsageInMaxNode 18 s|TRESUsageInMaxTask 18 s|
TRESUsageInMin 14 s|TRESUsageInMinNode 18 s|TRESUsageInMinTask 18 s|TRESUsageInTot 14 s|
TRESUsageOutAve 15 s|TRESUsageOutMax 15 s|TRESUsageOutMaxNode 19 s|
TRESUsageOutMaxTask 19 s|TRESUsageOutMin 15 s|TRESUsageOutMinNode 19 s|
TRESUsageOutMinTask 19 s|TRESUsageOutTot 15 s
"""
FIELDS: tuple[tuple[str, int, str], ...] = tuple(
    (n, int(w), k) for n, w, k in (e.split() for e in _TABLE.replace("\n", "").split("|") if e)
)
# Slurm's default, in its order
DEFAULT_FIELDS = (
    "JobID,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,"
    "MaxRSSTask,AveRSS,MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,"
    "MinCPUTask,AveCPU,NTasks,AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,"
    "ConsumedEnergy,MaxDiskRead,MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,"
    "MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,AveDiskWrite,TRESUsageInAve,"
    "TRESUsageInMax,TRESUsageInMaxNode,TRESUsageInMaxTask,TRESUsageInMin,"
    "TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutAve,"
    "TRESUsageOutMax,TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutMin,"
    "TRESUsageOutMinNode,TRESUsageOutMinTask,TRESUsageOutTot"
)
PID_FIELDS = "JobID,Nodelist,Pids"


def parse_fields(spec: str) -> list[AcctField]:
    """``-o`` as sacct reads it: case-insensitive prefixes in table order, ``%N`` widths."""
    out: list[AcctField] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        name, pct, width = item.partition("%")
        found = next((f for f in FIELDS if name and f[0].lower().startswith(name.lower())), None)
        if found is None:
            raise InvalidOption(f'Invalid field requested: "{name}"')
        size = found[1]
        if pct:
            digits = width.strip().lstrip("+-")
            digits = digits[: len(digits) - len(digits.lstrip("0123456789"))] or "0"
            size = -int(digits) if width.strip().startswith("-") else int(digits)
        out.append(AcctField(found[0], size, found[2]))
    return out


# ---------------------------------------------------------------- values


def _kb(value: int) -> str:
    return f"{value}K"


def _tres(values: dict[str, str]) -> str:
    return ",".join(f"{k}={values[k]}" for k in sorted(values))


def step_values(job_id: int, raw: t.StepStat) -> dict[str, str]:
    """One step's line, from its nodes' figures."""
    stat = StepStat(raw)
    nodes = [(entry.node, entry.live) for entry in stat.nodes]
    step = stat.step
    ntasks = max(stat.ntasks, 1)

    def cpu(live: LiveUsage) -> float:
        return live.usage.user_cpu_s + live.usage.system_cpu_s

    def per_task(live: LiveUsage, value: float) -> float:
        return value / max(live.ntasks, 1)

    def top(key: Callable[[LiveUsage], float]) -> tuple[str, LiveUsage]:
        return max(nodes, key=lambda n: key(n[1])) if nodes else ("", LiveUsage({}))

    def low(key: Callable[[LiveUsage], float]) -> tuple[str, LiveUsage]:
        return min(nodes, key=lambda n: key(n[1])) if nodes else ("", LiveUsage({}))

    rss_node, rss = top(lambda lv: lv.usage.max_rss_kb)
    vm_node, vm = top(lambda lv: lv.max_vmem_kb)
    cpu_max_node, cpu_max = top(lambda lv: per_task(lv, cpu(lv)))
    cpu_min_node, cpu_min = low(lambda lv: per_task(lv, cpu(lv)))
    total_cpu = sum(cpu(lv) for _, lv in nodes)
    ave_rss = sum(lv.usage.ave_rss_kb for _, lv in nodes) // ntasks
    ave_vm = sum(lv.ave_vmem_kb for _, lv in nodes) // ntasks
    tot_rss = sum(lv.usage.max_rss_kb for _, lv in nodes)
    tot_vm = sum(lv.max_vmem_kb for _, lv in nodes)
    first = nodes[0][0] if nodes else ""

    def task(live: LiveUsage) -> int:
        return live.first_rank

    max_cpu_s = per_task(cpu_max, cpu(cpu_max)) if nodes else 0.0
    min_cpu_s = per_task(cpu_min, cpu(cpu_min)) if nodes else 0.0
    ave_cpu_s = total_cpu / ntasks
    gpu: dict[str, tuple[str, str]] = {}
    u_rss = rss.usage
    if step == "batch" and (u_rss.gpu_util_max or u_rss.gpu_mem_max_mb):
        gpu = {
            "gres/gpumem": (f"{round(u_rss.gpu_mem_mean_mb)}M", f"{round(u_rss.gpu_mem_max_mb)}M"),
            "gres/gpuutil": (str(round(u_rss.gpu_util_mean)), str(round(u_rss.gpu_util_max))),
        }
    in_ave = {
        "cpu": format_elapsed(ave_cpu_s),
        "energy": "0",
        "fs/disk": "0",
        "mem": _kb(ave_rss),
        "pages": "0",
        "vmem": _kb(ave_vm),
        **{k: v[0] for k, v in gpu.items()},
    }
    in_max = {
        "cpu": format_elapsed(max_cpu_s),
        "energy": "0",
        "fs/disk": "0",
        "mem": _kb(u_rss.max_rss_kb),
        "pages": "0",
        "vmem": _kb(vm.max_vmem_kb),
        **{k: v[1] for k, v in gpu.items()},
    }
    where = {"cpu": cpu_max_node, "energy": first, "fs/disk": first, "mem": rss_node}
    where |= {"pages": first, "vmem": vm_node}
    # Slurm prints the task of the CPU figure in the time format (a quirk kept)
    which = {"cpu": format_elapsed(task(cpu_max)), "fs/disk": "0", "mem": str(task(rss))}
    which |= {"pages": "0", "vmem": str(task(vm))}
    in_min = {**in_max, "cpu": format_elapsed(min_cpu_s)}
    in_tot = {**in_ave, "cpu": format_elapsed(total_cpu), "mem": _kb(tot_rss)}
    in_tot["vmem"] = _kb(tot_vm)
    out_io = {"energy": "0", "fs/disk": "0"}
    batch = step == "batch"
    return {
        "JobID": f"{job_id}.{step}",
        "MaxVMSize": _kb(vm.max_vmem_kb),
        "MaxVMSizeNode": vm_node,
        "MaxVMSizeTask": str(task(vm)),
        "AveVMSize": _kb(ave_vm),
        "MaxRSS": _kb(u_rss.max_rss_kb),
        "MaxRSSNode": rss_node,
        "MaxRSSTask": str(task(rss)),
        "AveRSS": _kb(ave_rss),
        "MaxPages": "0",
        "MaxPagesNode": first,
        "MaxPagesTask": "0",
        "AvePages": "0",
        "MinCPU": format_elapsed(min_cpu_s),
        "MinCPUNode": cpu_min_node,
        "MinCPUTask": str(task(cpu_min)),
        "AveCPU": format_elapsed(ave_cpu_s),
        "NTasks": str(stat.ntasks),
        "AveCPUFreq": "0",
        "ReqCPUFreq": "0" if batch else "Unknown",
        "ReqCPUFreqMin": "0" if batch else "Unknown",
        "ReqCPUFreqMax": "0" if batch else "Unknown",
        "ReqCPUFreqGov": "0" if batch else "Unknown",
        "ConsumedEnergy": "0",
        "ConsumedEnergyRaw": "0",
        "MaxDiskRead": "0",
        "MaxDiskReadNode": first,
        "MaxDiskReadTask": "0",
        "AveDiskRead": "0",
        "MaxDiskWrite": "0",
        "MaxDiskWriteNode": first,
        "MaxDiskWriteTask": "0",
        "AveDiskWrite": "0",
        "Nodelist": ",".join(n for n, _ in nodes),
        "Pids": ",".join(str(p) for _, lv in nodes for p in lv.pids),
        "TRESUsageInAve": _tres(in_ave),
        "TRESUsageInMax": _tres(in_max),
        "TRESUsageInMaxNode": _tres({k: where.get(k, first) for k in in_max}),
        "TRESUsageInMaxTask": _tres(which),
        "TRESUsageInMin": _tres(in_min),
        "TRESUsageInMinNode": _tres(
            {k: where.get(k, first) for k in in_max} | {"cpu": cpu_min_node}
        ),
        "TRESUsageInMinTask": _tres({**which, "cpu": format_elapsed(task(cpu_min))}),
        "TRESUsageInTot": _tres(in_tot),
        "TRESUsageOutAve": _tres(out_io),
        "TRESUsageOutMax": _tres(out_io),
        "TRESUsageOutMaxNode": _tres(dict.fromkeys(out_io, first)),
        "TRESUsageOutMaxTask": "fs/disk=0",
        "TRESUsageOutMin": _tres(out_io),
        "TRESUsageOutMinNode": _tres(dict.fromkeys(out_io, first)),
        "TRESUsageOutMinTask": "fs/disk=0",
        "TRESUsageOutTot": _tres(out_io),
    }


def chosen_steps(reply: t.GetStepStatsResponse, step: str, all_steps: bool) -> list[t.StepStat]:
    """The steps a ``-j`` item names: one step; without one, the lowest srun step that
    runs (every step, the batch script first, with ``-a``)."""
    steps = [StepStat(s) for s in reply.get("steps", [])]
    if step:
        return [s.raw for s in steps if s.step == step]
    if all_steps:
        return [s.raw for s in steps]
    numbered = [s for s in steps if s.step.isdigit()]
    return [s.raw for s in sorted(numbered, key=lambda s: int(s.step))[:1]]


def format_stats(
    items: Sequence[tuple[int, str, t.GetStepStatsResponse]],
    fields: list[AcctField],
    *,
    all_steps: bool,
    header: bool = True,
    parsable: str = "",
) -> tuple[str, list[str]]:
    """(output, error lines) for each (job id, step asked, GetStepStats reply)."""
    rows: list[list[str]] = []
    errors: list[str] = []
    for job_id, step, reply in items:
        if reply.get("state", "JOB_STATE_PENDING") != "JOB_STATE_RUNNING":
            errors.append(f"No steps running for job {job_id}")
            continue
        chosen = chosen_steps(reply, step, all_steps)
        if step and not chosen:
            errors.append(f"StepId={job_id}.{step} not found running.")
        for stat in chosen:
            values = step_values(job_id, stat)
            rows.append([values.get(f.name, "") for f in fields])
    lines = acct_lines(fields, rows, header=header, parsable=parsable)
    return "".join(line + "\n" for line in lines), errors


# ---------------------------------------------------------------- command line

OPTIONS = (
    Option("a", "allsteps", "allsteps", FLAG, help="every step of the job(s), the batch one too"),
    Option("e", "helpformat", "helpformat", FLAG, help="list the fields -o takes"),
    Option("h", "help", "help", FLAG, help="this help"),
    Option("i", "pidformat", "pidformat", FLAG, help="JobID, Nodelist and Pids"),
    Option("j", "jobs", "jobs", LIST, help="job(.step) list to stat (required)"),
    Option("n", "noheader", "noheader", FLAG, help="no header lines"),
    Option("", "noconvert", "noconvert", FLAG, help="(figures are in K already)"),
    Option("o", "format", "format", help="comma separated fields, Field%width"),
    Option("p", "parsable", "parsable", FLAG, help="'|' after every field"),
    Option("P", "parsable2", "parsable2", FLAG, help="'|' between fields"),
    Option("", "usage", "usage", FLAG, help="brief usage"),
    Option("v", "verbose", "verbose", COUNT, help="(accepted for compatibility)"),
    Option("V", "version", "version", FLAG, help="print the version"),
)
USAGE = f"Usage: {PROG} [options] -j <job(.stepid)>\n\tUse --help for help\n"


def help_fields() -> str:
    names = [f"{name:<19}" for name, _, _ in FIELDS]
    return "".join(" ".join(names[i : i + 4]) + "\n" for i in range(0, len(names), 4))


def parse_items(jobs: str) -> list[tuple[int, str]]:
    out = []
    for item in jobs.split(","):
        item = item.strip()
        job, _, step = item.partition(".")
        base = job.split("_")[0]
        if not base.isdigit() or (step and step != "batch" and not step.isdigit()):
            raise InvalidOption(f"Bad job/step specified: {item}")
        out.append((int(base), step))
    return out


def main_body(argv: Sequence[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [<OPTION>] -j <job(.stepid)>")
    opts, rest = parser.parse(argv)
    if answered(parser, opts, usage=USAGE):
        return 0
    if opts.get("helpformat"):
        sys.stdout.write(help_fields())
        return 0
    jobs = ",".join([*(opts.get("jobs") or "").split(","), *rest]).strip(",")
    if not jobs:
        raise InvalidOption("You didn't give me any jobs to stat.")
    items = parse_items(jobs)
    spec = opts.get("format") or (PID_FIELDS if opts.get("pidformat") else DEFAULT_FIELDS)
    fields = parse_fields(spec)
    api = client()
    replies: list[tuple[int, str, t.GetStepStatsResponse]] = []
    errors: list[str] = []
    for job_id, step in items:
        try:
            reply = api.get_step_stats({"jobId": str(job_id), "step": step})
        except CorralError as exc:
            errors.append(_refused(job_id, exc))
            continue
        replies.append((job_id, step, reply))
    parsable = "P" if opts.get("parsable2") else "p" if opts.get("parsable") else ""
    out, more = format_stats(
        replies,
        fields,
        all_steps=bool(opts.get("allsteps")),
        # nothing to show but refusals: no header above the error (Slurm 22.05 prints one)
        header=not opts.get("noheader") and bool(replies or not errors),
        parsable=parsable,
    )
    sys.stdout.write(out)
    sys.stdout.flush()
    for line in (*errors, *more):
        sys.stderr.write(f"{PROG}: error: {line}\n")
    # a job that does not run is a line, as Slurm's; one that is not there, or not
    # the caller's to see, is an error (Slurm 22.05 exits 0 there, and says it twice)
    return 1 if errors else 0


def _refused(job_id: int, exc: CorralError) -> str:
    """ctld's answer once, in Slurm's words (its own message names the job already)."""
    if isinstance(exc, InvalidJobId):
        return f"couldn't get steps for job {job_id}"
    return exc.message


def main() -> None:
    run(PROG, lambda: main_body(sys.argv[1:]))


if __name__ == "__main__":
    main()
