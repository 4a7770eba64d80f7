"""Compact records of finished jobs, kept in memory for ``min_job_age``.

A finished job's script and environment are the bulk of its record in memory (a
login shell's environment as a protobuf map is ~10 KiB; the rest of the job ~2 KiB)
and nothing that runs reads them again; squeue and the scheduler never did. So a
finished job is kept as a fresh message without them (a new message: protobuf's arena
never gives back what a cleared field held) and the two are held beside it, serialized
(``JobIndex.held_spec``, ~1.5 KiB). What shows or stores the whole job asks ``whole``:
the job's row (a step that ends after its job rewrites the row), GetJobs with the spec
(``scontrol show job``'s script and environment), the web page's private section.

A job is made compact by the purge's sweep (``State.forget_finished``) and at load,
never in a change: by then no request still holds the record it replaces.
"""

from __future__ import annotations

from corral.wire import corral_pb2 as pb


def compact(job: pb.Job) -> tuple[pb.Job, bytes]:
    """``job`` without its script and environment (a new message), and those two
    serialized as a ``JobSpec`` of them alone."""
    held = pb.JobSpec(script=job.spec.script)
    held.environment.update(job.spec.environment)
    bare = pb.Job()
    bare.CopyFrom(job)
    bare.spec.ClearField("script")
    bare.spec.ClearField("environment")
    return pb.Job.FromString(bare.SerializeToString()), held.SerializeToString()


def whole(job: pb.Job, held: bytes | None) -> pb.Job:
    """``job`` itself when it is whole, else a copy with its script and environment back."""
    if not held:
        return job
    out = pb.Job()
    out.CopyFrom(job)
    out.spec.MergeFromString(held)
    return out
