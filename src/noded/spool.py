"""What noded keeps in its spool directory so that a new noded can settle an old one's jobs.

A noded killed without warning (kill -9, OOM killer, a crash) leaves its jobs running:
they live in their own sessions. The next noded must neither lose them silently nor
let ctld start a second copy beside them. Each job therefore has a small state file
(``job<id>/state.json``: its run, marker, root pid and cgroup) written when the node
accepts it and again once it runs, and ``instances`` lists the markers' instance
tokens of the nodeds that ran here, so step tasks without a state file are found too.

Status reports not yet acknowledged by ctld (``reports.pb``) are kept here too: a job
that ended while ctld was away has its state file removed once its report is queued,
so a noded restarted before ctld is back must still deliver that report (else ctld
would find the job missing and run it again).

A new noded cannot take the old processes over (they are not its children: their
exit status is lost with the old noded), so it kills every one of them, removes their
cgroups, and reports the jobs lost; ctld requeues them (or ends them NODE_FAIL).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError

from corral.wire import corral_pb2 as pb

STATE_FILE = "state.json"
INSTANCES_FILE = "instances"
REPORTS_FILE = "reports.pb"


@dataclass
class JobState:
    job_id: int
    restart_count: int
    marker: str
    uid: int | None = None
    root_pid: int = -1
    root_created: float = 0.0
    cgroup_version: int = 0
    cgroup_dirs: dict[str, str] = field(default_factory=dict)


def job_dir(spool: str, job_id: int) -> str:
    return os.path.join(spool, f"job{job_id:08d}")


def save(spool: str, state: JobState) -> None:
    """Write atomically: a noded killed mid-write leaves the previous version."""
    d = job_dir(spool, state.job_id)
    os.makedirs(d, mode=0o755, exist_ok=True)
    path = os.path.join(d, STATE_FILE)
    with open(path + ".tmp", "w") as fh:
        json.dump(asdict(state), fh)
    os.replace(path + ".tmp", path)


def remove(spool: str, job_id: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(job_dir(spool, job_id), STATE_FILE))


def load_all(spool: str) -> list[JobState]:
    """Every job state a previous noded left (unreadable files are skipped)."""
    found: list[JobState] = []
    for d in sorted(Path(spool).glob("job*")):
        path = d / STATE_FILE
        try:
            raw = json.loads(path.read_text())
            found.append(JobState(**raw))
        except (OSError, ValueError, TypeError):
            continue
    return found


def take_instances(spool: str, mine: str) -> list[str]:
    """The instance tokens of earlier nodeds here; from now on only ``mine`` is listed."""
    path = os.path.join(spool, INSTANCES_FILE)
    try:
        with open(path) as fh:
            earlier = [line.strip() for line in fh if line.strip()]
    except OSError:
        earlier = []
    with open(path + ".tmp", "w") as fh:
        fh.write("\n".join([*earlier, mine]) + "\n")
    os.replace(path + ".tmp", path)
    return earlier


def forget_instances(spool: str, mine: str) -> None:
    """Once the earlier nodeds' processes are all gone, only this one's token remains."""
    path = os.path.join(spool, INSTANCES_FILE)
    with open(path + ".tmp", "w") as fh:
        fh.write(mine + "\n")
    os.replace(path + ".tmp", path)


def save_reports(path: str, updates: Sequence[pb.JobStatusUpdate]) -> None:
    """Keep the undelivered reports (atomically); none left: no file. The page cache
    outlives a killed noded; a machine that loses it lost its jobs as well."""
    if not updates:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    data = pb.ReportJobStatusRequest(updates=updates).SerializeToString()
    with open(path + ".tmp", "wb") as fh:
        fh.write(data)
    os.replace(path + ".tmp", path)


def load_reports(path: str) -> list[pb.JobStatusUpdate]:
    """What an earlier noded here had not delivered (an unreadable file: nothing)."""
    try:
        with open(path, "rb") as fh:
            return list(pb.ReportJobStatusRequest.FromString(fh.read()).updates)
    except (OSError, DecodeError):
        return []
