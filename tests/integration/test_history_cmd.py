"""corral history JOBID | NODE on real daemons, run by real users: a job's story with
each transition's time, cause and detail (from the store: tests/unit/test_history.py
reads one long after it left ctld's memory), a node's recent changes with their
causes (and corral why NODE's tail of them); another user's job not at all under
private_data = jobs; hostile values in a story never reach the terminal raw; bad
arguments fail clearly with exit 1."""

from __future__ import annotations

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import wait_for
from tests.integration.realusers import Users, can_make_users, command, job, submit_as

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not can_make_users(), reason="needs root and useradd"),
]

ESC = "\x1b"
HOSTILE_DIR = f"/nonexistent-{ESC}[2J{ESC}]0;owned\x07-dir"


@pytest.fixture(scope="module")
def lab(users: Users, module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(
        nodes=2,
        gpus_per_node=0,
        controller_config=f'operators = ["{users.op.pw_name}"]\nprivate_data = ["jobs"]',
    )


def history(lab: LocalCluster, users: Users, who: str, *argv: str) -> tuple[int, str, str]:
    pw = getattr(users, who)
    return command(lab, pw, "corral_cmd", "history", *argv, cwd=users.home(pw))


def test_a_jobs_story_names_each_transition_with_its_cause(lab: LocalCluster, users: Users) -> None:
    job_id = submit_as(lab, users, users.alice, "-J", "storied", "--wrap", "true")
    lab.wait_state(job_id, "COMPLETED")
    alice = users.alice.pw_name
    code, out, err = history(lab, users, "alice", str(job_id))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"Job {job_id} (storied) of {alice} is COMPLETED: ")
    assert lines[1].split() == ["TIME", "EVENT", "STATE", "CAUSE", "DETAIL"]
    events = {line.split()[1]: line for line in lines[2:]}
    assert "-> PENDING" in events["submitted"] and f"user={alice}" in events["submitted"]
    assert "PENDING -> RUNNING" in events["started"] and "sched:" in events["started"]
    assert "COMPLETED" in out.split("\n", 2)[2]  # its end, with the report that made it
    # an operator may read it; bob may not even list it (private_data = jobs)
    assert history(lab, users, "op", str(job_id))[0] == 0
    code, out, err = history(lab, users, "bob", str(job_id))
    assert (code, out) == (1, "") and "corral history: Invalid job id specified" in err


def test_a_hostile_detail_in_a_story_reaches_no_terminal_raw(
    lab: LocalCluster, users: Users
) -> None:
    """alice's output path carries terminal escapes: noded's launch failure names it, and
    her story shows the failure without them."""
    job_id = submit_as(lab, users, users.alice, "-o", f"{HOSTILE_DIR}/out", "--wrap", "true")

    def failed_naming_it() -> bool:
        events = job(lab, job_id, withEvents=True)["events"]
        return any(ESC in e.get("detail", "") for e in events)

    wait_for(failed_naming_it, what="the launch failure's detail")
    code, out, err = history(lab, users, "alice", str(job_id))
    assert code == 0, err
    assert ESC not in out and "\x07" not in out
    assert "[2J ]0;owned -dir" in out  # each control character a space, on one line


def test_a_nodes_changes_and_why_node_name_their_causes(lab: LocalCluster, users: Users) -> None:
    op = users.op.pw_name
    code, _, err = command(
        lab, users.op, "scontrol", "update", "nodename=node02", "state=drain", "reason=fan"
    )
    assert code == 0, err
    try:
        code, out, err = history(lab, users, "bob", "node02")  # nodes are everyone's to see
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].startswith("Node node02 is DRAIN") and "oldest first" in lines[0]
        assert lines[1].split() == ["TIME", "EVENT", "CAUSE", "DETAIL"]
        assert lines[2].split()[1:4] == ["registered", "node:node02", "RegisterNode"]
        assert lines[-1].split()[1:4] == ["drained", "rpc:UpdateNode", op]
        code, out, err = command(
            lab, users.bob, "corral_cmd", "why", "node02", cwd=users.home(users.bob)
        )
        assert code == 0, err
        assert "Recent changes, oldest first" in out and "corral history node02" in out
    finally:
        command(lab, users.op, "scontrol", "update", "nodename=node02", "state=resume")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("-rf",), "(usage: corral history JOBID|NODE)"),  # an option, not a node
        ((), "the following arguments are required: JOBID|NODE"),
        (("999999",), "corral history: Invalid job id specified"),
        (("nosuchnode",), "corral history: Invalid node name specified"),
        (("1", "2"), "unrecognized arguments: 2"),
    ],
)
def test_bad_arguments_fail_clearly(
    lab: LocalCluster, users: Users, argv: tuple[str, ...], message: str
) -> None:
    code, out, err = history(lab, users, "bob", *argv)
    assert (code, out) == (1, ""), err
    assert message in err
