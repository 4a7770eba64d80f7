"""ctld's reconfigure on the in-process cluster (the real Cluster and store, a manual
clock): what applies, what is refused with nothing applied, what it does to pending
jobs. tests/integration/test_reconfigure.py runs the same on real daemons."""

from __future__ import annotations

from typing import Any

import pytest

from corral.errors import AccountingPolicy, ConfigError, InvalidNodeName, PermissionDenied
from corral.identity import Identity
from corral.testing.inprocess import InProcessCluster
from corral.wire import corral_pb2 as pb
from ctld.model.usage import UsageLedger

pytestmark = pytest.mark.timeout(60)
ALICE = Identity("alice", 1000, 1000)


def edit(c: InProcessCluster, old: str, new: str) -> None:
    path = c.layout.config_path
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def add(c: InProcessCluster, text: str) -> None:
    path = c.layout.config_path
    path.write_text(path.read_text() + text)


def reconfigure(c: InProcessCluster) -> dict[str, Any]:
    reply: dict[str, Any] = dict(c.client().reconfigure({}))
    return reply


def partitions(c: InProcessCluster) -> list[str]:
    return [p.name for p in c.cluster.config.partitions]


@pytest.fixture
def c(inprocess_factory: Any) -> InProcessCluster:
    made: InProcessCluster = inprocess_factory(nodes=3, gpus_per_node=0)
    return made


def test_a_partition_added_and_a_limit_changed_apply(c: InProcessCluster) -> None:
    edit(c, 'max_time = "1-00:00:00"', 'max_time = "00:10:00"')
    add(c, '\n[[partitions]]\nname = "extra"\nnodes = "node03"\n')
    reply = reconfigure(c)
    assert reply["ctld"]["applied"] == ["partitions.debug.max_time", "partitions.extra (added)"]
    assert partitions(c) == ["debug", "extra"]
    assert c.cluster.nodes["node03"].partitions == ["debug", "extra"]
    assert c.cluster.config.partitions[0].max_time_s == 600
    assert c.cluster.priorities.tiers == {"debug": 1, "extra": 1}
    assert c.dispatcher.reconfigured == ["node01", "node02", "node03"]  # each noded asked


def test_a_config_that_does_not_validate_changes_nothing(c: InProcessCluster) -> None:
    before = c.cluster.config
    edit(c, 'max_time = "1-00:00:00"', 'max_time = "00:10:00"')
    add(c, '\n[[partitions]]\nname = "bad"\nnodes = "node99"\n')
    with pytest.raises(ConfigError, match=r"partitions\[1\]\.nodes: 'node99' is not in any"):
        reconfigure(c)
    assert c.cluster.config is before  # not one key of the file applied
    assert c.dispatcher.reconfigured == []  # and the nodes not asked


def test_a_node_removed_with_jobs_is_refused_and_nothing_applies(c: InProcessCluster) -> None:
    job = c.submit(nodelist="node03")
    c.settle()
    assert c.state(job) == "RUNNING"
    before = c.cluster.config
    edit(c, 'names = "node[01-03]"', 'names = "node[01-02]"')
    edit(c, 'nodes = "node[01-03]"', 'nodes = "node[01-02]"')
    add(c, '\n[[partitions]]\nname = "extra"\nnodes = "node01"\n')
    with pytest.raises(ConfigError, match=rf"node03 .* runs job\(s\) {job}: drain it"):
        reconfigure(c)
    assert c.cluster.config is before and "node03" in c.cluster.nodes
    assert c.state(job) == "RUNNING"


def test_a_node_removed_is_refused_at_registration_and_one_added_registers(
    c: InProcessCluster,
) -> None:
    edit(c, 'names = "node[01-03]"', 'names = "node[01-02]"')
    edit(c, 'nodes = "node[01-03]"', 'nodes = "node[01-02]"')
    applied = ["nodes.node03 (removed)", "partitions.debug.nodes"]
    assert reconfigure(c)["ctld"]["applied"] == applied
    assert "node03" not in c.cluster.nodes
    back = pb.RegisterNodeRequest(name="node03", address="127.0.0.4:1")
    back.resources.cpus, back.resources.memory_mb = 16, 1024
    with pytest.raises(InvalidNodeName, match="node03 is not in the config"):
        c.run(c.cluster.register_node(back))
    edit(c, 'names = "node[01-02]"', 'names = "node[01-04]"')
    edit(c, 'nodes = "node[01-02]"', 'nodes = "node[01-04]"')
    applied = ["nodes.node03 (added)", "nodes.node04 (added)", "partitions.debug.nodes"]
    assert reconfigure(c)["ctld"]["applied"] == applied
    c.register_nodes(["node03", "node04"])
    job = c.submit(nodelist="node04")
    c.settle()
    assert c.state(job) == "RUNNING"


def test_a_drained_node_removed_and_added_back_is_still_drained(c: InProcessCluster) -> None:
    c.client().update_node({"names": ["node03"], "state": "DRAIN", "reason": "fan"})
    edit(c, 'names = "node[01-03]"', 'names = "node[01-02]"')
    edit(c, 'nodes = "node[01-03]"', 'nodes = "node[01-02]"')
    reconfigure(c)
    edit(c, 'names = "node[01-02]"', 'names = "node[01-03]"')
    edit(c, 'nodes = "node[01-02]"', 'nodes = "node[01-03]"')
    reconfigure(c)
    node = c.cluster.nodes["node03"]
    assert node.drain and node.reason == "fan"  # as a restart reads it back


def test_pending_jobs_whose_every_partition_is_gone_end_node_fail(c: InProcessCluster) -> None:
    add(c, '\n[[partitions]]\nname = "extra"\nnodes = "node03"\n')
    reconfigure(c)
    alone = c.submit(partitions=["extra"], hold=True)
    both = c.submit(partitions=["extra", "debug"], hold=True)
    running = c.submit(partitions=["extra"])
    c.settle()
    assert c.state(running) == "RUNNING"
    path = c.layout.config_path
    path.write_text(path.read_text().split('\n[[partitions]]\nname = "extra"')[0])
    reply = reconfigure(c)
    assert reply["ctld"]["applied"] == ["partitions.extra (removed)"]
    assert reply["endedJobIds"] == [str(alone)]
    ended = c.job(alone)
    assert (c.state(alone), ended["reason"], ended["exitCode"]) == ("NODE_FAIL", "NodeDown", 1)
    assert c.state(both) == "PENDING"  # "debug" is left
    assert c.state(running) == "RUNNING"  # a reconfigure never touches a running job


def test_restart_only_keys_are_named_and_kept(c: InProcessCluster) -> None:
    port = c.cluster.config.controller.grpc_port
    edit(c, f"grpc_port = {port}", f"grpc_port = {port + 1}")
    edit(c, "kill_wait_s = 2.0", "kill_wait_s = 7.0")
    reply = reconfigure(c)
    assert reply["ctld"] == {
        "daemon": "ctld",
        "applied": ["controller.kill_wait_s"],
        "restart": ["controller.grpc_port"],
    }
    assert c.cluster.config.controller.grpc_port == port
    assert c.cluster.config.controller.kill_wait_s == 7.0
    assert reconfigure(c)["ctld"] == {"daemon": "ctld", "restart": ["controller.grpc_port"]}


def test_priority_weights_qos_and_operators_apply(c: InProcessCluster) -> None:
    add(
        c,
        "\n[priority]\nweight_age = 0\nweight_fairshare = 0\nweight_qos = 50000\n"
        '\n[[qos]]\nname = "urgent"\npriority = 100\n',
    )
    edit(c, "kill_wait_s = 2.0", 'kill_wait_s = 2.0\noperators = ["root", "daemon"]')
    with pytest.raises(Exception, match="Invalid qos"):
        c.submit(qos="urgent")
    reconfigure(c)
    assert c.cluster.priority_weights()["QOS"] == 50000
    job = c.submit(qos="urgent")
    assert c.job(job)["priorityFactors"]["qos"] == 1.0  # the top QOS
    assert int(c.job(job)["priority"]) == 50000 + 1000  # QOS, and the partition's 1,000
    assert c.cluster.policy.is_operator(Identity("daemon", 1, 1))  # a uid of this host
    # a QOS changed: its new limit holds from the next submit
    c.submit(qos="urgent", timeLimitS=600)
    edit(c, "priority = 100", 'priority = 100\nmax_wall = "00:05:00"')
    assert reconfigure(c)["ctld"]["applied"] == ["qos.urgent.max_wall"]
    with pytest.raises(AccountingPolicy):
        c.submit(qos="urgent", timeLimitS=600)


def test_only_an_administrator_reconfigures(c: InProcessCluster) -> None:
    add(c, '\n[[partitions]]\nname = "extra"\nnodes = "node03"\n')
    with pytest.raises(PermissionDenied, match="reconfigure needs an administrator"):
        c.client(ALICE).reconfigure({})
    assert partitions(c) == ["debug"]


def test_a_new_half_life_does_not_reach_back() -> None:
    from corral.config import PriorityConfig

    ledger = UsageLedger(PriorityConfig(decay_half_life_s=100))
    ledger.add(("a", "u"), 100.0, at=0.0)
    ledger.set_priority(PriorityConfig(decay_half_life_s=1_000_000), now=100.0)
    assert ledger.snapshot(100.0, [])[("a", "u")] == pytest.approx(50.0)  # halved before
    assert ledger.snapshot(200.0, [])[("a", "u")] == pytest.approx(50.0, rel=1e-3)
