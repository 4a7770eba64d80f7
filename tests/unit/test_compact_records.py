"""Jobs are kept compact (ctld/model/records.py): no script or environment in the record in
memory from submit to purge, yet the launch, GetJobs with the spec, the job's row (also
when it is written again after the job ended) and a reload all still have them."""

from __future__ import annotations

import pytest

from corral.testing.inprocess import InProcessCluster, make_cluster
from corral.wire import corral_pb2 as pb
from ctld.core.commit import _save

SCRIPT = "#!/bin/sh\necho compact\n"
ENV = {"PATH": "/usr/bin:/bin", "PROJECT": "physics", "HUGE": "x" * 500}


def _finished(c: InProcessCluster) -> int:
    job_id = c.submit(SCRIPT, environment=ENV)
    c.settle()
    c.exit(job_id)
    c.settle()
    assert c.state(job_id) == "COMPLETED"
    return int(job_id)


def _spec_shown(c: InProcessCluster, job_id: int) -> dict[str, object]:
    reply = c.client().get_jobs({"filter": {"jobIds": [str(job_id)]}, "withSpec": True})
    return dict(reply["jobs"][0]["spec"])  # type: ignore[typeddict-item]


def _stored(c: InProcessCluster, job_id: int) -> pb.Job:
    found = c.cluster.store.job_story(job_id)
    assert found is not None
    return found


@pytest.mark.timeout(60)
def test_a_finished_job_is_kept_compact_and_shown_whole(
    inprocess_cluster: InProcessCluster,
) -> None:
    c = inprocess_cluster
    job_id = _finished(c)
    running_id = c.submit(SCRIPT, environment=ENV)
    c.settle()
    c.cluster.purge_finished()  # the sweep: min_job_age is not over, the job stays
    assert job_id in c.cluster.jobs
    kept = c.cluster.jobs[job_id]
    assert kept.spec.script == "" and not kept.spec.environment
    assert kept.state == pb.JOB_STATE_COMPLETED and kept.spec.name == "test"
    # a running job is compact too, but its launch carried everything
    running = c.cluster.jobs[int(running_id)]
    assert running.state == pb.JOB_STATE_RUNNING and running.spec.script == ""
    launched = {r.job.job_id: r.job for _, r in c.dispatcher.launched}
    assert launched[int(running_id)].spec.script == SCRIPT
    assert dict(launched[int(running_id)].spec.environment) == ENV
    assert _stored(c, int(running_id)).spec.script == SCRIPT  # the row written at submit
    shown = _spec_shown(c, job_id)
    assert shown["script"] == SCRIPT and shown["environment"] == ENV
    # the JSON path (the gateway's) and the typed one agree
    typed = c.cluster.whole(kept)
    assert typed.spec.script == SCRIPT and dict(typed.spec.environment) == ENV
    assert kept.spec.script == ""  # whole() copied: the record stays compact


@pytest.mark.timeout(60)
def test_a_row_written_after_compaction_and_a_reload_keep_the_script(
    inprocess_cluster: InProcessCluster,
) -> None:
    c = inprocess_cluster
    job_id = _finished(c)
    c.cluster.purge_finished()
    st = c.cluster.state
    kept = st.jobs[job_id]
    assert kept.spec.script == ""
    # a row rewritten now (as a step's end after its job's does) carries them back

    async def rewrite() -> None:
        await st.store.commit(_save(st, kept))

    c.run(rewrite())
    row = _stored(c, job_id)
    assert row.spec.script == SCRIPT and dict(row.spec.environment) == ENV

    async def reload() -> None:
        again = make_cluster(c.config, c.store_url, clock=c.clock)
        try:
            loaded = again.jobs[job_id]
            assert loaded.spec.script == "" and not loaded.spec.environment
            assert again.whole(loaded).spec.script == SCRIPT
        finally:
            again.store.close()

    c.run(reload())


@pytest.mark.timeout(60)
def test_a_held_job_is_compact_and_an_array_shares_one_held_spec(
    inprocess_cluster: InProcessCluster,
) -> None:
    c = inprocess_cluster
    first = int(c.submit(SCRIPT, environment=ENV, array="0-2", hold=True))
    st = c.cluster.state
    assert all(st.jobs[first + i].spec.script == "" for i in range(3))
    held = {id(st.index.held_spec[first + i]) for i in range(3)}
    assert len(held) == 1  # one bytes object for the array's tasks
    assert _spec_shown(c, first + 2)["script"] == SCRIPT
