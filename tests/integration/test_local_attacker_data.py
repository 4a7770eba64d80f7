"""Another user's secrets and limits, tried by real second users on real daemons (issue 22;
docs/security.md, "The local attacker").

alice's jobs carry secrets: an ``--export`` value, a ``--wrap`` script, and a step whose
srun line has its own ``--export``. bob calls every Controller RPC (the list comes from
the generated method table, so a new RPC fails here until it is classified), over the
HTTP gateway (a process that became bob, on ctld's socket) and over gRPC (bob's token),
and runs the commands that show jobs; none of it may carry a secret. Then: a user may
only lower her time limit, and an account she has no association with is refused once
the accounting database has accounts.
"""

from __future__ import annotations

import json
import pwd
import secrets
import time
from collections.abc import Callable
from typing import Any

import pytest

from corral.errors import CorralError
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from corral.wire.methods import CONTROLLER, SERVICES
from tests.conftest import wait_for
from tests.integration.realusers import Users, can_make_users, command, job, raw, submit_as

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.skipif(not can_make_users(), reason="needs root and useradd"),
]

TAG = secrets.token_hex(4)
EXPORTED = f"s3cret-export-{TAG}"
WRAPPED = f"s3cret-wrap-{TAG}"
STEP_EXPORTED = f"s3cret-step-{TAG}"
SECRETS = (EXPORTED, WRAPPED, STEP_EXPORTED)


@pytest.fixture(scope="module")
def lab(users: Users, module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(
        nodes=2, gpus_per_node=0, controller_config=f'operators = ["{users.op.pw_name}"]'
    )


@pytest.fixture(scope="module")
def alices(lab: LocalCluster, users: Users) -> tuple[int, int]:
    """alice's held job (secret --export value and --wrap script) and her running job
    with a step whose srun line exports a secret of its own."""
    alice = users.alice
    held = submit_as(
        lab, users, alice, "-H", f"--export=ALL,API_KEY={EXPORTED}", "--wrap", f"echo {WRAPPED}"
    )
    running = submit_as(lab, users, alice, "-t", "5", "--wrap", "sleep 200")
    lab.wait_state(running, "RUNNING")
    # the step as srun makes it (CreateStep as alice); its tasks never need to start
    step = {"jobId": str(running), "name": "env", "argv": ["env"]}
    step["submitLine"] = f"srun --export=ALL,STEP_KEY={STEP_EXPORTED} env"
    made = raw(lab, alice, "CreateStep", {"spec": step})
    assert "ok" in made, made
    return held, running


def _requests(held: int, running: int, bob: str) -> dict[str, list[dict[str, Any]]]:
    """A request of bob's for each Controller RPC, naming alice's jobs where it takes one."""
    ids = [str(held), str(running)]
    now = time.time()
    return {
        "SubmitJob": [{"spec": {"script": "#!/bin/sh\ntrue\n", "workDir": "/"}, "testOnly": True}],
        "CancelJobs": [{"filter": {"jobIds": ids}}],
        "GetJobs": [
            {"filter": {"jobIds": ids}, "withSpec": True, "withEvents": True},
            {"withSpec": True},
        ],
        "QueryAccounting": [{"filter": {"jobIds": ids}, "duplicates": True}, {}],
        "GetNodes": [{}],
        "GetPartitions": [{}],
        "UpdateJob": [{"jobIds": ids, "action": "JOB_UPDATE_FIELDS", "name": "mine"}],
        "GetClusterInfo": [{}],
        "GetShares": [{}],
        "ReportUsage": [{"bounds": [now - 3600, now + 60]}],
        "Sacctmgr": [{"action": "list", "entity": e} for e in ("user", "assoc", "qos")],
        "ExplainJob": [{"jobId": i} for i in ids],
        "CreateWebLogin": [{}],  # a login URL for bob himself: nothing of alice's
        "CreateReservation": [{"reservation": {"name": "r", "nodes": "node01"}}],
        "UpdateReservation": [{"name": "r"}],
        "DeleteReservation": [{"name": "r"}],
        "GetReservations": [{}],
        "UpdateNode": [{"names": ["node01"], "state": "DRAIN", "reason": bob}],
        "CreateStep": [{"spec": {"jobId": str(running)}}],
        "CompleteStep": [{"jobId": str(running), "stepId": 0, "cancelled": True}],
        "CompleteJob": [{"jobId": str(running)}],
        "StepNodeLost": [{"jobId": str(running), "stepId": 0, "node": "node01"}],
        "GetStepStats": [{"jobId": str(running)}, {"jobId": str(running), "step": "0"}],
        "AttachStep": [{"jobId": str(running), "stepId": 0}],
        "Reconfigure": [{}],  # refused him: an administrator's
        "GetBatchScript": [{"jobId": i} for i in ids],  # her --wrap script: her own
    }


# the replies that carry alice's jobs to bob, scrubbed (the others refuse him or carry
# no job: CreateStep gives a job only to its owner and operators)
CARRY_JOBS = {"GetJobs", "QueryAccounting", "ExplainJob"}


def _gateway(lab: LocalCluster, users: Users) -> Callable[[str, dict[str, Any]], Any]:
    return lambda method, request: raw(lab, users.bob, method, request)


def _grpc(lab: LocalCluster, users: Users) -> Callable[[str, dict[str, Any]], Any]:
    api = lab.grpc_client(users.bob.pw_name)

    def call(method: str, request: dict[str, Any]) -> Any:
        try:
            return {"ok": api.call(method, request)}
        except CorralError as exc:
            return {"error": type(exc).__name__, "message": exc.message}

    return call


@pytest.mark.parametrize("transport", [_gateway, _grpc], ids=["gateway", "grpc"])
def test_no_rpc_gives_another_user_a_secret(
    lab: LocalCluster,
    users: Users,
    alices: tuple[int, int],
    transport: Callable[[LocalCluster, Users], Callable[[str, dict[str, Any]], Any]],
) -> None:
    held, running = alices
    requests = _requests(held, running, users.bob.pw_name)
    assert set(requests) == set(SERVICES[CONTROLLER]), "classify each new RPC here"
    call = transport(lab, users)
    leaks = []
    for method, each in requests.items():
        for request in each:
            text = json.dumps(call(method, request))
            leaks += [(method, s) for s in SECRETS if s in text]
            if method in CARRY_JOBS:
                # not vacuous: bob does see alice's jobs, scrubbed
                assert str(held) in text or str(running) in text, (method, text)
    assert leaks == []
    shown = call("GetJobs", {"filter": {"jobIds": [str(running)]}})["ok"]["jobs"][0]
    assert shown["steps"][0]["spec"]["submitLine"] == "srun --export=<hidden> env"
    stored = call("QueryAccounting", {"filter": {"jobIds": [str(running)]}})["ok"]["jobs"][0]
    assert stored["steps"][0]["spec"]["submitLine"] == "srun --export=<hidden> env"
    explained = call("ExplainJob", {"jobId": str(held)})["ok"]["job"]
    assert explained["spec"]["submitLine"].endswith("-H --export=<hidden> --wrap <hidden>")
    # alice herself sees all of it
    mine = raw(lab, users.alice, "GetJobs", {"filter": {"jobIds": [str(running)]}})["ok"]
    assert STEP_EXPORTED in mine["jobs"][0]["steps"][0]["spec"]["submitLine"]
    assert job(lab, held)["state"] == "JOB_STATE_PENDING"  # nothing bob asked changed it


def test_the_commands_show_another_user_no_secret(
    lab: LocalCluster, users: Users, alices: tuple[int, int]
) -> None:
    held, running = alices
    ids = f"{held},{running}"
    for argv in (
        ("squeue", "-s", "-h", "-o", "%i %j %u"),
        ("squeue", "-h", "-O", "JobID,Command:200"),
        ("sacct", "-j", ids, "-P", "-o", "JobID,JobName,SubmitLine"),
        ("scontrol", "show", "job", str(held)),
        ("scontrol", "show", "job", str(running)),
        ("corral_cmd", "why", str(held)),
        ("corral_cmd", "why", str(running)),
        ("corral_cmd", "history", str(held)),
        ("corral_cmd", "history", str(running)),
    ):
        code, out, err = command(lab, users.bob, *argv, cwd=users.home(users.bob))
        assert code == 0, (argv, err)
        assert not any(s in out + err for s in SECRETS), (argv, out)
    code, out, _ = command(lab, users.bob, "sacct", "-j", str(running), "-P", "-o", "SubmitLine")
    assert "srun --export=<hidden> env" in out
    # her batch scripts (the --wrap secret is one): refused, in Slurm's words
    for argv in (
        ("scontrol", "write", "batch_script", str(held), "-"),
        ("sacct", "--batch-script", "-j", ids),
    ):
        code, out, err = command(lab, users.bob, *argv, cwd=users.home(users.bob))
        assert code == 1 and "Invalid user id" in err, (argv, out, err)
        assert not any(s in out + err for s in SECRETS), (argv, out)
    code, out, err = command(lab, users.alice, "sacct", "-B", "-j", str(held))
    assert code == 0 and WRAPPED in out, err


def test_a_user_may_only_lower_her_own_time_limit(
    lab: LocalCluster, users: Users, alices: tuple[int, int]
) -> None:
    held, _ = alices
    alice, op = users.alice, users.op
    assert int(job(lab, held)["timeLimitS"]) != -1
    before = job(lab, held)["timeLimitS"]
    for value in ("0", "UNLIMITED", "INFINITE"):  # no limit at all: each is a raise
        argv = ("scontrol", "update", f"JobId={held}", f"TimeLimit={value}")
        code, _, err = command(lab, alice, *argv)
        assert code == 1 and "only an operator may extend a time limit" in err, (value, err)
        assert job(lab, held)["timeLimitS"] == before
    code, _, err = command(lab, alice, "scontrol", "update", f"JobId={held}", "TimeLimit=1")
    assert code == 0, err
    assert job(lab, held)["timeLimitS"] == "60"
    code, _, err = command(lab, op, "scontrol", "update", f"JobId={held}", "TimeLimit=0")
    assert code == 0, err
    assert job(lab, held)["timeLimitS"] == "-1"  # an operator may lift it


REFUSED = (
    "sbatch: error: Batch job submission failed: "
    "Invalid account or account/partition combination specified\n"
)


def test_no_account_name_escapes_her_limits(users: Users, cluster_factory: ClusterFactory) -> None:
    # the default config, as an operator sets limits up (docs/admin-guide.md)
    c = cluster_factory(nodes=1, gpus_per_node=8)
    alice, bob = users.alice, users.bob
    # a fresh cluster, no accounts yet: any job, any -A (corral up, make demo)
    loose = submit_as(c, users, bob, "-H", "-A", "anything", "--wrap", "true")
    assert job(c, loose)["account"] == "anything"

    def sacctmgr(*argv: str) -> None:  # as root, an operator
        code, _, err = command(c, pwd.getpwuid(0), "sacctmgr", "-i", *argv)
        assert code == 0, err

    sacctmgr("add", "account", "vision")
    sacctmgr("add", "user", alice.pw_name, "Account=vision", "DefaultAccount=vision")
    sacctmgr("modify", "user", alice.pw_name, "set", "GrpTRES=gres/gpu=4")
    for who, account in ((alice, "anything"), (alice, "root"), (bob, None)):
        argv = ["sbatch", "--gres=gpu:4", "-t", "5", "--wrap", "sleep 100"]
        if account is not None:
            argv[1:1] = ["-A", account]
        code, out, err = command(c, who, *argv, cwd=users.home(who))
        assert (code, err) == (1, REFUSED), (who.pw_name, account, out)
    first, second = (
        submit_as(c, users, alice, "--gres=gpu:4", "-t", "5", "--wrap", "sleep 100")
        for _ in range(2)
    )
    c.wait_state(first, "RUNNING")
    wait_for(lambda: job(c, second).get("reason") == "AssocGrpGRES", 30, "her GrpTRES")
    assert job(c, second)["state"] == "JOB_STATE_PENDING"
    assert job(c, first)["account"] == "vision"
    c.client().call("CancelJobs", {"filter": {"jobIds": [str(first), str(second), str(loose)]}})
