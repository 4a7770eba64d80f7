"""A per-job outcome of a request that names many jobs (scancel, scontrol hold, update,
top): each job's failure is its own, the others go on."""

from __future__ import annotations

from corral.errors import CorralError
from corral.wire import corral_pb2 as pb


def failure(job_id: int, exc: CorralError) -> pb.CancelOutcome:
    return pb.CancelOutcome(job_id=job_id, ok=False, error=type(exc).__name__, message=exc.message)
