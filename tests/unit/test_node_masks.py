"""GetNodes under a field mask makes only the asked fields (ctld/planning/queries.py, nodes.py):
each one, alone, is what the whole answer masked to it carries (reservation and maint
are made together: the transport masks the answer after)."""

from __future__ import annotations

import pathlib

from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.codec.fieldmask import FieldMask
from tests.unit.test_elastic import ALICE, make, settle, spec

ROOT = Identity("root", 0, 0)


async def test_every_field_alone_is_the_whole_answer_masked(tmp_path: pathlib.Path) -> None:
    cluster, clock, _ = await make(tmp_path, nodes=4, spare_nodes=1)
    job = await cluster.submit(ALICE, spec(cpus_per_task=8))
    await settle(cluster)
    assert job.allocations  # one node busy, one drained, one reserved, one the spare
    await cluster.update_node(
        ROOT, pb.UpdateNodeRequest(names=["n2"], state="DRAIN", reason="disk")
    )
    now = clock()
    resv = pb.Reservation(
        name="maint",
        nodes="n3",
        start_time=now + 1,
        end_time=now + 3600,
        flags=["MAINT"],
        users=["root"],
    )
    await cluster.create_reservation(ROOT, resv)
    clock.advance(2)  # under way
    whole = cluster.queries.node_list([])
    assert any(n.reservation for n in whole) and any(n.spare for n in whole)
    for field in pb.Node.DESCRIPTOR.fields:
        mask = FieldMask(pb.Node.DESCRIPTOR, [field.name], "GetNodes")
        made = cluster.queries.node_list([], {field.name})  # the transport masks it then
        assert [mask.apply(n) for n in made] == [mask.apply(n) for n in whole], field.name
        assert all(len(n.ListFields()) <= 2 for n in made)  # nothing else was made
    named = cluster.queries.node_list(["n[2-3]"], {"reason", "reservation"})
    assert [(n.reason, n.reservation) for n in named] == [("disk", ""), ("", "maint")]
