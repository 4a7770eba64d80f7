"""Compact job records: no script or environment in the job ctld keeps in memory.

A job's script and environment are the bulk of its record in memory (a login shell's
environment as a protobuf map is ~10 KiB; the rest of the job ~2 KiB) and nothing in
ctld but the launch reads them; squeue and the scheduler never did. So a job is kept
as a message without them (a new message: protobuf's arena
never gives back what a cleared field held) and the two are held beside it, serialized
(``JobIndex.held_spec``, ~1.5 KiB). What shows or stores the whole job asks ``whole``:
the job's row (a step that ends after its job rewrites the row), GetJobs with the spec
(``scontrol show job``'s script and environment), the web page's private section.

Since a pending job's environment is the bulk of it too (and nothing in ctld reads it
before the launch), a job is made compact from its submit on (``Intake.submit``: the
record never holds them), and at load; the launch (``scheduling.py``) sends the whole
job. A job that is not yet compact (made before this, or by a test's hand) is made so
by the purge's sweep once finished (``State.forget_finished``), never in a change: by
then no request still holds the record it replaces.
"""

from __future__ import annotations

from corral.wire import corral_pb2 as pb


def split(spec: pb.JobSpec) -> tuple[pb.JobSpec, bytes]:
    """A submitted spec without its script and environment (a new message), and those
    two serialized: what a job is made of at submit (every task of an array shares the
    one ``bytes``)."""
    held = pb.JobSpec(script=spec.script)
    held.environment.update(spec.environment)
    bare = pb.JobSpec()
    bare.CopyFrom(spec)
    bare.ClearField("script")
    bare.ClearField("environment")
    return pb.JobSpec.FromString(bare.SerializeToString()), held.SerializeToString()


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


def whole_spec(spec: pb.JobSpec, held: bytes | None) -> pb.JobSpec:
    """A copy of ``spec`` with its script and environment back (``held``)."""
    out = pb.JobSpec()
    out.CopyFrom(spec)
    if held:
        out.MergeFromString(held)
    return out
