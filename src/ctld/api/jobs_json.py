"""GetJobs as JSON for the gateway, each job encoded once per revision: squeue in a loop
over 100,000 unchanged pending jobs re-encodes none of them (a masked request's too, for
the first few masks: a command's format asks the same each time).

The encodings are kept in one table per encoding (events? script? the caller's own
job? which mask), looked up once per call and then by job id: hashing a key holding the
mask for each of 100,000 jobs cost as much as the cached answer itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.codec import fieldmask
from ctld.codec.jsonmap import Skip, message_to_json
from ctld.control.cluster import Cluster

_HIDDEN_SPEC = frozenset({"script", "environment"})
# (with_events, with_spec) -> fields a GetJobs reply leaves out; constants, so the
# converter's plans are cached
_JOB_SKIPS: dict[tuple[bool, bool], Skip] = {
    (False, False): {"corral.v1.Job": frozenset({"events"}), "corral.v1.JobSpec": _HIDDEN_SPEC},
    (True, False): {"corral.v1.JobSpec": _HIDDEN_SPEC},
    (False, True): {"corral.v1.Job": frozenset({"events"})},
    (True, True): {},
}
MASKS_KEPT = 8  # masks whose encodings are cached (a hostile variety is encoded anew)

# one encoder for every answer: json.dumps with separators makes a new one per call,
# which was a third of encoding a job
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


def dumps(value: object) -> bytes:
    """Compact JSON text, as bytes."""
    return _ENCODE(value).encode()


def job_encoder(skip: Skip, mask: fieldmask.FieldMask | None) -> Callable[[pb.Job], Any]:
    """A job's JSON value without the ``skip`` fields, and only the mask's if one is
    given (the mask's Skip made once for the call, not once per job)."""
    if mask is None:
        return lambda job: message_to_json(job, skip)
    masked = mask.skip(skip)
    if masked is None:  # a mask that cannot be a Skip: copy the fields, then encode
        return lambda job: message_to_json(mask.apply(job), skip)
    return lambda job: message_to_json(job, masked)


Table = tuple[bool, dict[int, tuple[int, bytes]], Callable[[pb.Job], Any]]


class JobsJson:
    """The per-job encodings GetJobs' JSON answers are made of, by revision."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        # each job's JSON by encoding key, then job id: (revision, bytes)
        self._kept: dict[tuple[Any, ...], dict[int, tuple[int, bytes]]] = {}
        self._masks: set[tuple[str, ...]] = set()  # masks whose encodings are kept

    def answer(
        self,
        req: pb.GetJobsRequest,
        who: Identity,
        mask: fieldmask.FieldMask | None,
        jobs: Iterable[pb.Job],
    ) -> bytes:
        """The answer to ``req`` for ``jobs`` (those ``who`` may see, a page of them)."""
        policy = self.cluster.policy
        revisions = self.cluster.revisions
        paths = mask.paths if mask is not None else ()
        cached = mask is None or paths in self._masks or len(self._masks) < MASKS_KEPT
        if mask is not None and cached:
            self._masks.add(paths)
        tables: dict[bool, Table] = {}
        parts: list[bytes] = []
        for job in jobs:
            own = policy.sees_spec(who, job)
            table = tables.get(own)
            if table is None:
                # others' jobs: scrubbed (Policy.shown; the key's "own")
                key = (req.with_events, req.with_spec and own, own, paths)
                kept = self._kept.setdefault(key, {}) if cached else {}
                table = tables[own] = (key[1], kept, job_encoder(_JOB_SKIPS[key[:2]], mask))
            whole, kept, encode = table
            rev = revisions.get(job.job_id, 0)
            hit = kept.get(job.job_id)
            if hit is None or hit[0] != rev:
                shown = policy.shown(who, self.cluster.whole(job) if whole else job)
                hit = kept[job.job_id] = (rev, dumps(encode(shown)))
            parts.append(hit[1])
        known = self.cluster.jobs
        for _, kept, _ in tables.values():
            if len(kept) > len(known) + 1024:  # drop the entries of purged jobs
                for stale in [i for i in kept if i not in known]:
                    del kept[stale]
        now = dumps(self.cluster.clock())
        if not parts:
            return b'{"now":' + now + b"}"
        return b'{"jobs":[' + b",".join(parts) + b'],"now":' + now + b"}"

    def runs(
        self, runs: Iterable[pb.Job], mask: fieldmask.FieldMask | None, with_events: bool = False
    ) -> bytes:
        """QueryAccounting's answer for ``runs`` (already as their reader may see them):
        without script or environment (and events unless asked), as the gRPC answer,
        skipped as encoded."""
        encode = job_encoder(_JOB_SKIPS[(with_events, False)], mask)
        parts = [dumps(encode(run)) for run in runs]
        now = dumps(self.cluster.clock())
        if not parts:
            return b'{"now":' + now + b"}"
        return b'{"jobs":[' + b",".join(parts) + b'],"now":' + now + b"}"
