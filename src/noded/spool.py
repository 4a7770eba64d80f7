"""What noded keeps in its spool directory so that a new noded can settle an old one's jobs.

A noded killed without warning (kill -9, OOM killer, a crash) leaves its jobs running:
they live in their own sessions. The next noded must neither lose them silently nor
let ctld start a second copy beside them. Each job and step therefore has a small
record in ``<spool>/state`` (records.py: root's alone), written when the node accepts
it and again once it runs, and ``instances`` lists the instance tokens of the nodeds
that ran here (the fence guard's cue).

Status reports not yet acknowledged by ctld (``reports.pb``) are kept here too: a job
that ended while ctld was away has its record removed once its report is queued,
so a noded restarted before ctld is back must still deliver that report (else ctld
would find the job missing and run it again).

A new noded takes over what the old one's supervisors still hold (takeover.py); what
they do not, it kills, removes their cgroups, and reports the jobs lost; ctld
requeues them (or ends them NODE_FAIL).

The spool itself must be noded's alone (``check_private``): root writes here.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Sequence

from google.protobuf.message import DecodeError

from corral.wire import corral_pb2 as pb
from noded.records import JobState, load_jobs, remove_job, save_job

INSTANCES_FILE = "instances"
REPORTS_FILE = "reports.pb"

__all__ = ["JobState", "check_private", "job_dir", "load_all", "remove", "save"]


def job_dir(spool: str, job_id: int) -> str:
    return os.path.join(spool, f"job{job_id:08d}")


def save(spool: str, state: JobState) -> None:
    save_job(spool, state)


def remove(spool: str, job_id: int) -> None:
    remove_job(spool, job_id)


def load_all(spool: str) -> list[JobState]:
    """Every job record a previous noded left (unreadable files are skipped)."""
    return load_jobs(spool)


def check_private(spool: str) -> str:
    """Why root may not write in ``spool`` ("" when it may): the spool and each directory
    above it must be root's (or noded's user's), and none writable by others, unless
    sticky above the spool (/tmp): else a user could swap what root writes into."""
    me = os.geteuid()
    here = os.path.abspath(spool)
    while True:
        try:
            st = os.stat(here)
        except OSError as exc:
            return f"cannot check {here}: {exc.strerror}"
        mode = stat.S_IMODE(st.st_mode)
        writable = mode & 0o022 and (here == os.path.abspath(spool) or not mode & stat.S_ISVTX)
        if st.st_uid not in (0, me) or writable:
            return (
                f"{here} (owner uid {st.st_uid}, mode {mode:04o}) can be changed by other "
                "users: noded writes there as root; make it root's and not group- or "
                "world-writable"
            )
        parent = os.path.dirname(here)
        if parent == here:
            return ""
        here = parent


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


def forget_instances(spool: str, mine: str, keep: Sequence[str] = ()) -> None:
    """Once the earlier nodeds' processes are gone, only the tokens of what runs on are
    listed (``keep``: the markers of work taken over), this noded's last."""
    path = os.path.join(spool, INSTANCES_FILE)
    tokens = [t for t in dict.fromkeys(keep) if t and t != mine] + [mine]
    with open(path + ".tmp", "w") as fh:
        fh.write("\n".join(tokens) + "\n")
    os.replace(path + ".tmp", path)


def current_instance(spool: str) -> str:
    """The token of the noded that runs here now (the last one listed)."""
    try:
        with open(os.path.join(spool, INSTANCES_FILE)) as fh:
            tokens = fh.read().split()
    except OSError:
        return ""
    return tokens[-1] if tokens else ""


def marker_token(marker: str) -> str:
    """The instance token in a job's marker (``node:job:token``)."""
    return marker.rpartition(":")[2].split(".")[0]


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
