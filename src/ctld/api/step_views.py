"""sstat's and sattach's reads of a running job's steps (GetStepStats, AttachStep)."""

from __future__ import annotations

from corral.errors import InvalidJobId, JobStateConflict, PermissionDenied
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.core.state import State
from ctld.model import jobstate as js
from ctld.model.authz import Policy
from ctld.model.live import LiveFigures


def step_stats(
    state: State, live: LiveFigures, policy: Policy, who: Identity, req: pb.GetStepStatsRequest
) -> pb.GetStepStatsResponse:
    """What a job's steps used so far: its owner's and operators' (Slurm: another
    user's job is "Invalid user id")."""
    job = state.jobs.get(req.job_id)
    if job is None or not policy.may_see(who, job):
        raise InvalidJobId(f"couldn't get steps for job {req.job_id}")
    if job.uid != who.uid and not policy.is_operator(who):
        raise PermissionDenied(f"Invalid user id: job {job.job_id} is {job.user}'s")
    reply = pb.GetStepStatsResponse(job_id=job.job_id, state=job.state, now=state.clock())
    if job.state in js.ON_NODE:
        nodes = [a.node for a in job.allocations]
        reply.steps.extend(live.step_stats(job, req.step, nodes))
    return reply


def attach(state: State, who: Identity, req: pb.AttachStepRequest) -> pb.Step:
    """A running step's record, for its owner alone: sattach gets its credential."""
    job = state.jobs.get(req.job_id)
    if job is None:
        raise InvalidJobId()
    if job.uid != who.uid:
        # not even an operator: the credential lets its holder feed the tasks' stdin
        raise PermissionDenied(
            f"Access/permission denied: only {job.user} may attach to job {job.job_id}'s steps"
        )
    step = next((s for s in job.steps if s.step_id == req.step_id), None)
    if step is None or job.state not in js.ON_NODE or step.state != js.RUNNING:
        raise JobStateConflict(JobStateConflict.slurm_message)  # Slurm's words
    return step
