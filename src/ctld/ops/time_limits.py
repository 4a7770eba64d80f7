"""ctld's own time limit for allocations (salloc, srun outside a job): no noded process
times them, so ctld ends them when their limit is reached (TIMEOUT)."""

from __future__ import annotations

import structlog

from ctld.core.commit import Change
from ctld.core.outbox import Outbox
from ctld.core.state import State
from ctld.model import jobstate as js
from ctld.ops.endings import Endings

log = structlog.get_logger("ctld")


async def enforce_allocation_limits(state: State, outbox: Outbox, endings: Endings) -> None:
    now = state.clock()
    async with Change(state, outbox) as ch:
        for job in state.on_node():
            if (
                job.spec.allocation_only
                and job.state == js.RUNNING
                and job.time_limit_s > 0
                and now >= job.start_time + job.time_limit_s
            ):
                log.info("allocation reached its time limit", job_id=job.job_id)
                endings.end_allocation(
                    ch, job, js.TIMEOUT, cause="ctld:time limit", exit_code=0, exit_signal=0
                )
