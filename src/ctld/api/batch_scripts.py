"""A job's batch script for its owner and operators (GetBatchScript: ``scontrol write
batch_script``, ``sacct --batch-script``, Slurm 21.08's pair).

The script is read from the job's row in the store, which keeps it whole from submit
on (ctld/storage/store_rows.py) while memory keeps jobs compact (ctld/model/records.py): so it is
there for a pending, a running and an ended job alike. Who may read it is the
authorization table's rule for a job's script (``Policy.sees_spec``); a job the caller
may not even see (``private_data``) is an unknown job, as sacct and squeue have it.
"""

from __future__ import annotations

import asyncio

from corral.errors import InvalidJobId, PermissionDenied
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.control.cluster import Cluster


async def batch_script(cluster: Cluster, who: Identity, job_id: int) -> pb.GetBatchScriptResponse:
    policy = cluster.policy
    live = cluster.jobs.get(job_id)
    stored = await asyncio.to_thread(cluster.store.job_story, job_id)
    job = live or stored
    if job is None or not policy.may_see(who, job):
        raise InvalidJobId()
    if live is None and not policy.may_see_accounting(who, job.uid):
        raise InvalidJobId()  # private_data = accounting: sacct would not list it either
    if not policy.sees_spec(who, job):
        raise PermissionDenied("Invalid user id")  # Slurm's words for another's script
    script = stored.spec.script if stored is not None else ""
    if not script and live is not None:  # not yet in the store: a test's hand-made job
        script = cluster.whole(live).spec.script
    return pb.GetBatchScriptResponse(job_id=job.job_id, script=script)
