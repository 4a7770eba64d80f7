"""The snapshot's node views are reused from pass to pass while a node is unchanged,
and rebuilt when its allocations, its registration or its schedulability change: the
views the core sees are always those a fresh build would give."""

from __future__ import annotations

import pytest

from corral.testing.inprocess import InProcessCluster
from corral.wire import corral_pb2 as pb


def _views(c: InProcessCluster) -> dict[str, object]:
    return {v.name: v for v in c.cluster.snapshot().nodes}


@pytest.mark.timeout(60)
def test_node_views_are_reused_until_the_node_changes(
    inprocess_cluster: InProcessCluster,
) -> None:
    c = inprocess_cluster
    first = _views(c)
    again = _views(c)
    assert all(again[n] is first[n] for n in first)  # nothing changed: the same views

    job_id = c.submit("#!/bin/sh\ntrue\n", gpusPerNode=2)
    c.settle()
    node = c.cluster.jobs[int(job_id)].batch_host
    busy = _views(c)
    assert busy[node] is not first[node]
    assert len(busy[node].gpus_free) == len(first[node].gpus_free) - 2  # type: ignore[attr-defined]
    other = next(n for n in first if n != node)
    assert busy[other] is first[other]

    c.exit(job_id)
    c.settle()
    freed = _views(c)
    assert freed[node].gpus_free == first[node].gpus_free  # type: ignore[attr-defined]

    c.client().call("UpdateNode", {"names": [other], "state": "DRAIN", "reason": "maintenance"})
    drained = _views(c)
    assert drained[other].schedulable is False  # type: ignore[attr-defined]
    c.register_nodes([other])  # a registration brings new resources: a new view
    assert _views(c)[other] is not drained[other]
    assert c.cluster.nodes[other].state in (pb.NODE_STATE_DRAIN, pb.NODE_STATE_DRAINING)


@pytest.mark.timeout(60)
def test_the_views_kept_are_those_a_fresh_build_makes(
    inprocess_cluster: InProcessCluster,
) -> None:
    """Only the nodes that named themselves changed are looked at again (node_views.py):
    after each kind of change the views equal a build that looks at every node."""
    from ctld.planning.node_views import NodeViews

    c = inprocess_cluster
    st = c.cluster.state

    def check() -> None:
        kept = c.cluster.snapshot().nodes
        fresh = NodeViews().build(st.nodes, st.config, st.clock())
        assert kept == fresh

    names = sorted(st.nodes)
    check()
    job_id = c.submit("#!/bin/sh\ntrue\n", gpusPerNode=1)
    c.settle()
    check()
    c.client().call("UpdateNode", {"names": [names[0]], "state": "DRAIN", "reason": "x"})
    check()
    st.nodes[names[-1]].late = True  # a heartbeat overdue, as the check sets it
    check()
    st.nodes[names[-1]].late = False
    c.exit(job_id)
    c.settle()
    check()
    c.client().call("UpdateNode", {"names": [names[0]], "state": "RESUME"})
    c.register_nodes([names[0]])
    check()
