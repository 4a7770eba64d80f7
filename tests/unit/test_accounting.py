"""The accounting database (sacctmgr) in ctld, on both stores: records, limits held by
the scheduler with Slurm's reasons, submit-time refusals, default accounts, who may
change it, and that a restart keeps everything."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from corral.errors import AccountingPolicy, InvalidAccount, InvalidRequest, PermissionDenied
from corral.identity import Identity
from corral.testing.inprocess import InProcessCluster
from ctld.accounts.sacctmgr_ops import format_tres, parse_tres
from ctld.model.accounting import Accounting

ALICE = Identity("alice", 5001, 5001)
BOB = Identity("bob", 5002, 5002)


@pytest.fixture
def lab(store_url: str, tmp_path: pathlib.Path) -> Iterator[InProcessCluster]:
    c = InProcessCluster(tmp_path / "lab", nodes=2, gpus_per_node=8, store_url=store_url)
    c.register_nodes()
    try:
        yield c
    finally:
        c.stop()


def sm(
    c: InProcessCluster, action: str, entity: str, *args: str, who: Identity | None = None
) -> Any:
    return c.client(who).sacctmgr({"action": action, "entity": entity, "args": list(args)})


def submit(c: InProcessCluster, who: Identity, **spec: Any) -> str:
    full = {"name": "t", "script": "#!/bin/sh\ntrue\n", "workDir": "/tmp", **spec}
    return str(c.client(who).submit_job({"spec": full})["jobId"])


def records(c: InProcessCluster, entity: str, *args: str) -> list[dict[str, str]]:
    return [dict(r["fields"]) for r in sm(c, "list", entity, *args).get("records", [])]


def setup_vision(c: InProcessCluster) -> None:
    sm(
        c,
        "add",
        "account",
        "vision",
        "Description=x",
        "Organization=y",
        "Parent=root",
        "Fairshare=10",
    )
    sm(c, "add", "user", "alice", "Account=vision", "DefaultAccount=vision")


def test_add_and_list_with_slurms_messages(lab: InProcessCluster) -> None:
    added = sm(
        lab,
        "add",
        "account",
        "vision",
        "Description=x",
        "Organization=y",
        "Parent=root",
        "Fairshare=10",
    )
    assert added["message"] == (
        " Adding Account(s)\n  vision\n Settings\n  Description     = x\n"
        "  Organization    = y\n Associations\n  A = vision     C = corral    \n"
        " Settings\n  Fairshare     = 10"
    )
    user = sm(lab, "add", "user", "alice", "Account=vision", "DefaultAccount=vision")
    assert user["message"] == (
        " Adding User(s)\n  alice\n Settings =\n  Default Account = vision\n"
        " Associations =\n  U = alice     A = vision     C = corral    "
    )
    assert records(lab, "account", "vision") == [{"Account": "vision", "Descr": "x", "Org": "y"}]
    assert records(lab, "user") == [{"User": "alice", "Def Acct": "vision", "Admin": "None"}]
    with pytest.raises(InvalidRequest, match="Nothing new added"):
        sm(lab, "add", "account", "vision")


def test_limits_round_trip_and_survive_a_restart(lab: InProcessCluster) -> None:
    setup_vision(lab)
    sm(
        lab,
        "modify",
        "user",
        "alice",
        "set",
        "GrpTRES=gres/gpu=4,cpu=8,mem=10G",
        "MaxJobs=2",
        "MaxSubmitJobs=5",
        "MaxWall=1-00:00:00",
    )
    sm(
        lab,
        "modify",
        "qos",
        "normal",
        "set",
        "Priority=100",
        "Preempt=",
        "PreemptMode=requeue",
        "GraceTime=60",
        "UsageFactor=2",
        "MaxTRESPerUser=gres/gpu=6",
    )
    sm(
        lab,
        "add",
        "qos",
        "high",
        "Priority=200",
        "Preempt=normal",
        "PreemptMode=requeue",
        "GraceTime=60",
    )
    lab.restart()
    row = next(r for r in records(lab, "assoc", "where", "user=alice"))
    assert (row["Account"], row["User"], row["GrpTRES"], row["MaxJobs"], row["MaxSubmit"]) == (
        "vision",
        "alice",
        "cpu=8,mem=10G,gres/gpu=4",
        "2",
        "5",
    )
    assert row["MaxWall"] == "1-00:00:00"
    high = lab.cluster.state.config.qos
    by_name = {q.name: q for q in high}
    # sacctmgr's QOS is the one QosConfig ctld consults (priorities, preemption)
    assert by_name["high"].preempt == ("normal",)
    assert by_name["high"].preempt_mode == "requeue"
    assert by_name["high"].grace_time_s == 60
    assert by_name["normal"].usage_factor == 2.0
    assert by_name["normal"].max_tres_per_user == (("gres/gpu", 6),)
    assert lab.cluster.priorities.qos_priority["high"] == 200
    qos = {r["Name"]: r for r in records(lab, "qos")}
    assert (qos["high"]["Preempt"], qos["high"]["PreemptMode"], qos["high"]["GraceTime"]) == (
        "normal",
        "requeue",
        "00:01:00",
    )
    assert qos["normal"]["UsageFactor"] == "2.000000"
    assert qos["normal"]["MaxTRESPU"] == "gres/gpu=6"


def test_grp_gres_holds_the_third_job_until_one_ends(lab: InProcessCluster) -> None:
    setup_vision(lab)
    sm(lab, "modify", "user", "alice", "set", "GrpTRES=gres/gpu=4")
    ids = [submit(lab, ALICE, gpusPerNode=2, timeLimitS="600") for _ in range(3)]
    lab.settle()
    assert [lab.state(i) for i in ids] == ["RUNNING", "RUNNING", "PENDING"]
    assert lab.job(ids[2])["reason"] == "AssocGrpGRES"
    assert lab.job(ids[0])["account"] == "vision"  # no -A: the DefaultAccount
    lab.exit(ids[0])
    lab.settle()
    assert lab.state(ids[2]) == "RUNNING"


@pytest.mark.parametrize(
    ("limit", "spec", "reason"),
    [
        ("GrpTRES=cpu=4", {"cpusPerTask": 4}, "AssocGrpCpuLimit"),
        ("GrpTRES=mem=1000", {"memPerNodeMb": "600"}, "AssocGrpMemLimit"),
        ("GrpJobs=1", {}, "AssocGrpJobsLimit"),
        ("MaxJobs=1", {}, "AssocMaxJobsLimit"),
    ],
)
def test_each_association_limit_has_slurms_reason(
    lab: InProcessCluster, limit: str, spec: dict[str, Any], reason: str
) -> None:
    setup_vision(lab)
    target = "account" if limit.startswith("Grp") else "user"
    name = "vision" if target == "account" else "alice"
    sm(lab, "modify", target, name, "set", limit)
    ids = [submit(lab, ALICE, timeLimitS="600", **spec) for _ in range(2)]
    lab.settle()
    assert lab.state(ids[0]) == "RUNNING"
    assert lab.job(ids[1])["reason"] == reason


def test_qos_limits_hold_with_qos_reasons(lab: InProcessCluster) -> None:
    setup_vision(lab)
    sm(lab, "modify", "qos", "normal", "set", "MaxTRESPerUser=gres/gpu=2")
    ids = [submit(lab, ALICE, gpusPerNode=2, timeLimitS="600") for _ in range(2)]
    lab.settle()
    assert lab.job(ids[1])["reason"] == "QOSMaxGRESPerUser"
    sm(lab, "modify", "qos", "normal", "set", "MaxTRESPerUser=gres/gpu=-1", "MaxJobsPerUser=1")
    lab.settle()
    assert lab.job(ids[1])["reason"] == "QOSMaxJobsPerUserLimit"
    sm(lab, "modify", "qos", "normal", "set", "MaxJobsPerUser=-1")  # raised: it starts
    lab.settle()
    assert lab.state(ids[1]) == "RUNNING"


def test_submit_limits_refuse_with_slurms_message(lab: InProcessCluster) -> None:
    setup_vision(lab)
    sm(lab, "modify", "user", "alice", "set", "MaxSubmitJobs=2", "MaxWall=60", "MaxTRES=gres/gpu=4")
    message = "Job violates accounting/QOS policy (job submit limit, user's size and/or time"
    with pytest.raises(AccountingPolicy, match=message.replace("(", r"\(")):
        submit(lab, ALICE, timeLimitS="7200")  # over MaxWall (60 minutes)
    with pytest.raises(AccountingPolicy):
        submit(lab, ALICE, gpusPerNode=8, timeLimitS="60")  # over MaxTRESPerJob
    first = submit(lab, ALICE)  # no -t: MaxWall becomes its limit
    assert lab.job(first)["timeLimitS"] == "3600"
    submit(lab, ALICE, hold=True)
    with pytest.raises(AccountingPolicy):
        submit(lab, ALICE, hold=True)  # a third job: over MaxSubmitJobs
    sm(lab, "modify", "account", "vision", "set", "GrpSubmitJobs=2")
    sm(lab, "modify", "user", "alice", "set", "MaxSubmitJobs=-1")
    with pytest.raises(AccountingPolicy):
        submit(lab, ALICE, hold=True)


def test_enforced_associations_refuse_users_without_one(
    store_url: str, tmp_path: pathlib.Path
) -> None:
    c = InProcessCluster(
        tmp_path / "strict",
        nodes=1,
        gpus_per_node=2,
        store_url=store_url,
        controller_config='accounting_enforce = ["associations", "limits"]',
    )
    try:
        c.register_nodes()
        setup_vision(c)
        with pytest.raises(InvalidAccount, match="Invalid account or account/partition"):
            submit(c, BOB)
        with pytest.raises(InvalidAccount):
            submit(c, ALICE, account="other")
        assert c.job(submit(c, ALICE))["account"] == "vision"
    finally:
        c.stop()


def test_by_default_an_account_must_be_a_users_once_the_database_names_anyone(
    lab: InProcessCluster,
) -> None:
    # a fresh cluster (root alone) takes any -A, and jobs without one (corral up, demo)
    assert lab.job(submit(lab, BOB, account="anything"))["account"] == "anything"
    assert lab.job(submit(lab, BOB))["account"] == "root"  # no DefaultAccount: root
    # once it has accounts, limits are kept per association: no -A escapes them
    setup_vision(lab)
    sm(lab, "modify", "user", "alice", "set", "GrpTRES=gres/gpu=4")
    for who, account in ((ALICE, "anything"), (ALICE, "root"), (BOB, ""), (BOB, "vision")):
        with pytest.raises(InvalidAccount, match="Invalid account or account/partition"):
            submit(lab, who, account=account, gpusPerNode=8)
    assert lab.job(submit(lab, ALICE))["account"] == "vision"  # her DefaultAccount


@pytest.mark.parametrize(("enforce", "refused"), [('["limits"]', True), ("[]", False)])
def test_limits_imply_associations_and_an_empty_list_turns_it_off(
    store_url: str, tmp_path: pathlib.Path, enforce: str, refused: bool
) -> None:
    # Slurm's AccountingStorageEnforce: "limits" sets "associations" too
    c = InProcessCluster(
        tmp_path / "c",
        nodes=1,
        gpus_per_node=2,
        store_url=store_url,
        controller_config=f"accounting_enforce = {enforce}",
    )
    try:
        c.register_nodes()
        setup_vision(c)
        if refused:
            with pytest.raises(InvalidAccount):
                submit(c, ALICE, account="anything")
        else:
            assert c.job(submit(c, ALICE, account="anything"))["account"] == "anything"
    finally:
        c.stop()


def test_only_operators_change_it_and_admin_level_makes_one(lab: InProcessCluster) -> None:
    setup_vision(lab)
    with pytest.raises(PermissionDenied):
        sm(lab, "modify", "user", "alice", "set", "MaxJobs=9", who=ALICE)
    assert records(lab, "user", who_is_alice := "alice")[0]["User"] == who_is_alice
    sm(lab, "modify", "user", "alice", "set", "AdminLevel=Operator")
    sm(lab, "modify", "user", "alice", "set", "MaxJobs=9", who=ALICE)  # an operator now
    assert lab.cluster.policy.is_operator(ALICE)
    assert records(lab, "user")[0]["Admin"] == "Operator"


def test_fairshare_tree_comes_from_the_database(lab: InProcessCluster) -> None:
    setup_vision(lab)
    sm(lab, "add", "account", "nlp", "Fairshare=30")
    sm(lab, "add", "user", "bob", "Account=nlp")
    tree = {a.name: a for a in lab.cluster.priorities.tree}
    assert tree["vision"].shares == 10 and tree["nlp"].shares == 30
    assert tree["vision"].users == (("alice", 1),)
    rows = lab.client().get_shares({})["rows"]
    assert {(r.get("account"), r.get("user", "")) for r in rows} >= {
        ("vision", "alice"),
        ("nlp", "bob"),
    }


def test_config_accounts_seed_and_database_wins(tmp_path: pathlib.Path) -> None:
    from corral.config import parse_config

    config = parse_config(
        {
            "accounts": [{"name": "vision", "shares": 5, "users": ["alice"]}],
            "qos": [{"name": "high", "priority": 10}],
        }
    )
    acc = Accounting(config)
    assert acc.users["alice"].default_account == "vision"
    assert acc.assocs["vision/"].fairshare == 5
    acc.load(
        [
            ("assoc", "vision/", '{"account": "vision", "fairshare": 7}'),
            ("qos", "high", '{"name": "high", "priority": 99}'),
        ]
    )
    assert acc.assocs["vision/"].fairshare == 7
    assert acc.qos["high"].priority == 99


def test_tres_strings() -> None:
    assert parse_tres("GrpTRES", "gres/gpu=4,mem=10G,cpu=2", {}) == {
        "gres/gpu": 4,
        "mem": 10240,
        "cpu": 2,
    }
    assert parse_tres("GrpTRES", "cpu=-1", {"cpu": 2, "gres/gpu": 1}) == {"gres/gpu": 1}
    assert format_tres({"gres/gpu": 4, "mem": 10240, "cpu": 2}) == "cpu=2,mem=10G,gres/gpu=4"
    with pytest.raises(InvalidRequest, match="Bad GrpTRES"):
        parse_tres("GrpTRES", "disk=4", {})


def test_bad_words_are_named(lab: InProcessCluster) -> None:
    with pytest.raises(InvalidRequest, match="Unknown option: Colour=red"):
        sm(lab, "add", "account", "x", "Colour=red")
    with pytest.raises(InvalidRequest, match="Parent account 'nope' doesn't exist"):
        sm(lab, "add", "account", "x", "Parent=nope")
    with pytest.raises(InvalidRequest, match="Invalid qos: nope"):
        sm(lab, "modify", "qos", "normal", "set", "Preempt=nope")


def test_upgrade_from_the_previous_schema_keeps_jobs_and_adds_accounting(
    store_url: str,
) -> None:
    import asyncio
    import subprocess
    import sys

    import sqlalchemy as sa
    from alembic import command

    from corral.wire import corral_pb2 as pb
    from ctld.storage import migrate
    from ctld.storage.store import Op, Store, insert_job, normalize_url

    engine = sa.create_engine(normalize_url(store_url))
    with engine.begin() as conn:  # a store as the previous corral (revision 0002) left it
        command.upgrade(migrate._config(conn), "0002")
        row = insert_job(pb.Job(job_id=7, user="alice", account="vision", submit_time=1.0))
        conn.execute(
            sa.table("jobs", *(sa.column(k) for k in row.inserts[0])).insert(), row.inserts
        )
    engine.dispose()
    done = subprocess.run(
        [str(pathlib.Path(sys.executable).parent / "corral"), "db", "upgrade", "--url", store_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"from 0002 to {migrate.head()}" in done.stdout
    store = Store(store_url)
    store.open()
    try:
        assert [j.job_id for j in store.load_jobs(active_states=[0], finished_after=0)] == [7]
        assert store.load_accounting() == []

        async def put() -> None:
            await store.commit(Op(accounting_put=[("user", "alice", '{"name": "alice"}')]))

        asyncio.run(put())
        assert store.load_accounting() == [("user", "alice", '{"name": "alice"}')]
    finally:
        store.close()


def test_qos_lists_and_default_qos(lab: InProcessCluster) -> None:
    from corral.errors import InvalidQos

    setup_vision(lab)
    sm(lab, "add", "qos", "high", "Priority=10")
    assert lab.job(submit(lab, ALICE, qos="high"))["qos"] == "high"  # no list: any QOS
    sm(lab, "modify", "user", "alice", "set", "QOS=normal", "DefaultQOS=normal")
    with pytest.raises(InvalidQos):
        submit(lab, ALICE, qos="high")
    sm(lab, "modify", "user", "alice", "set", "QOS+=high", "DefaultQOS=high")
    assert lab.job(submit(lab, ALICE))["qos"] == "high"  # no --qos: DefaultQOS
    row = records(lab, "assoc", "where", "user=alice")[0]
    assert (row["QOS"], row["Def QOS"]) == ("high,normal", "high")


def test_modify_and_delete_print_what_they_changed(lab: InProcessCluster) -> None:
    setup_vision(lab)
    assert sm(lab, "modify", "account", "vision", "set", "GrpJobs=5")["message"] == (
        " Modified account associations...\n  C = corral     A = vision of root"
    )
    assert sm(lab, "modify", "assoc", "where", "account=vision", "user=alice", "set", "MaxJobs=1")[
        "message"
    ] == (
        " Modified account associations...\n  C = corral     A = vision               U = alice    "
    )
    assert sm(lab, "delete", "user", "alice", "where", "account=vision")["message"] == (
        " Deleting user associations...\n  C = corral     A = vision     U = alice    "
    )
    assert sm(lab, "delete", "account", "vision")["message"] == " Deleting accounts...\n  vision"
    lab.restart()
    assert [r["Account"] for r in records(lab, "assoc")] == ["root"]
