"""Who may do what, on real daemons, with real second users (docs/security.md).

Each row of the authorization table is tried by real users made with useradd: through
the real commands (run in a child process that became that user, so ctld learns the
uid from the kernel: tests/integration/realusers.py) and through forged raw requests.
Node-side: calls without the node's certificate, with another node's certificate, and
straight to noded.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import pwd
import shutil
import ssl
import subprocess
import sys
import urllib.request
from typing import Any

import grpc
import pytest

from corral.auth import CONTROLLER_CN
from corral.auth import tls as ctls
from corral.errors import CorralError
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory, free_port
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from tests.conftest import wait_for
from tests.integration.realusers import (
    Users,
    as_user,
    can_make_users,
    command,
    job,
    raw,
    submit_as,
)

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not can_make_users(), reason="needs root and useradd"),
]


@pytest.fixture(scope="module")
def secure(users: Users, module_cluster_factory: ClusterFactory) -> LocalCluster:
    # the factory's base directory is world-readable: noded's spool, where the users'
    # scripts are read from, is under it
    return module_cluster_factory(
        nodes=2, gpus_per_node=0, controller_config=f'operators = ["{users.op.pw_name}"]'
    )


# ---------------------------------------------------------------- users: submit as themselves


def test_a_user_submits_as_themselves_whatever_they_claim(
    secure: LocalCluster, users: Users
) -> None:
    bob = users.bob
    job_id = submit_as(secure, users, bob, "--wrap", "id -u; id -g", "-o", "id.out")
    seen = secure.wait_state(job_id, "COMPLETED", "FAILED")
    assert (seen["user"], seen["uid"]) == (bob.pw_name, bob.pw_uid)
    text = (users.home(bob) / "id.out").read_text().split()
    assert text == [str(bob.pw_uid), str(bob.pw_gid)]
    # forged: root's uid, group shadow (42) in the old headers: no effect at all
    claims = {"x-corral-user": "root", "x-corral-uid": "0", "x-corral-gid": "42"}
    spec = {
        "script": "#!/bin/sh\nid -u > forged.out\n",
        "workDir": str(users.home(bob)),
        "environment": {"PATH": "/usr/bin:/bin"},
    }
    reply = raw(secure, bob, "SubmitJob", {"spec": spec}, headers=claims)
    forged = secure.wait_state(int(reply["ok"]["jobId"]), "COMPLETED", "FAILED")
    assert (forged["uid"], forged.get("gid", 0)) == (bob.pw_uid, bob.pw_gid)
    assert (users.home(bob) / "forged.out").read_text().strip() == str(bob.pw_uid)


def test_a_group_the_user_is_not_in_is_refused(secure: LocalCluster, users: Users) -> None:
    # a process of bob's running with gid 42 (shadow), which the database does not give him
    code, _, err = command(
        secure, users.bob, "sbatch", "--wrap", "true", cwd=users.home(users.bob), gid=42
    )
    assert code != 0 and "not a member of group 42" in err
    # nor alice's group, which the database gives alice only
    group = users.group.gr_gid
    home = users.home(users.bob)
    code, _, err = command(secure, users.bob, "sbatch", "--wrap", "true", cwd=home, gid=group)
    assert code != 0 and f"not a member of group {group}" in err
    # alice, running with it (as after `sg`), submits and her job runs with it
    alice, home = users.alice, users.home(users.alice)
    argv = ("sbatch", "--parsable", "-o", "gid.out", "--wrap", "id -g; id -G")
    code, out, err = command(secure, alice, *argv, cwd=home, gid=group)
    assert code == 0, err
    seen = secure.wait_state(int(out.strip()), "COMPLETED", "FAILED")
    assert (seen["uid"], seen["gid"]) == (alice.pw_uid, group)
    gid, groups = (home / "gid.out").read_text().splitlines()
    assert int(gid) == group and str(group) in groups.split()


# ---------------------------------------------------------------- users: their own jobs only


def test_users_act_on_their_own_jobs_only(secure: LocalCluster, users: Users) -> None:
    alice, bob = users.alice, users.bob
    held = submit_as(secure, users, alice, "-H", "--wrap", "true")
    assert secure.wait_state(held, "PENDING")
    for argv in (
        ("scancel", str(held)),
        ("scontrol", "release", str(held)),
        ("scontrol", "hold", str(held)),
        ("scontrol", "update", f"JobId={held}", "TimeLimit=5"),
    ):
        code, out, err = command(secure, bob, *argv, cwd=users.home(bob))
        assert code != 0 and "Access/permission denied" in err + out, (argv, err, out)
    # the same as forged raw requests, with operator claims in the headers
    claims = {"x-corral-user": "root", "x-corral-uid": "0"}
    out = raw(secure, bob, "CancelJobs", {"filter": {"jobIds": [str(held)]}}, headers=claims)
    assert out["ok"]["outcomes"][0]["error"] == "PermissionDenied"
    upd = raw(
        secure,
        bob,
        "UpdateJob",
        {"jobIds": [str(held)], "action": "JOB_UPDATE_RELEASE"},
        headers=claims,
    )
    assert upd["ok"]["outcomes"][0]["error"] == "PermissionDenied"
    assert job(secure, held)["state"] == "JOB_STATE_PENDING"
    # the owner may
    code, _, err = command(secure, alice, "scontrol", "update", f"JobId={held}", "TimeLimit=5")
    assert code == 0, err
    # ...but raising a limit of their own job is an operator's (Slurm's rule)
    argv = ("scontrol", "update", f"JobId={held}", "TimeLimit=2-00:00:00")
    code, _, err = command(secure, alice, *argv)
    assert code != 0 and "only an operator may extend a time limit" in err
    assert int(job(secure, held)["timeLimitS"]) == 300
    code, _, err = command(secure, alice, "scancel", str(held))
    assert code == 0, err
    secure.wait_state(held, "CANCELLED")


def test_users_never_see_others_scripts_environment_or_exports(
    secure: LocalCluster, users: Users
) -> None:
    alice, bob = users.alice, users.bob
    job_id = submit_as(
        # --wra: the commands take unambiguous prefixes, and the submit line keeps them
        secure,
        users,
        alice,
        "-H",
        "--export=ALL,API_KEY=s3cret",
        "--wra",
        "echo s3cret-script",
    )
    others = raw(secure, bob, "GetJobs", {"filter": {"jobIds": [str(job_id)]}, "withSpec": True})[
        "ok"
    ]["jobs"][0]
    text = json.dumps(others)
    assert "s3cret" not in text and "script" not in others["spec"]
    mine = raw(secure, alice, "GetJobs", {"filter": {"jobIds": [str(job_id)]}, "withSpec": True})[
        "ok"
    ]["jobs"][0]
    assert "s3cret-script" in mine["spec"]["script"]
    assert mine["spec"]["environment"]["API_KEY"] == "s3cret"
    code, out, err = command(
        secure, bob, "sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "SubmitLine"
    )
    assert code == 0, err
    assert "s3cret" not in out and "--export=<hidden>" in out
    code, out, _ = command(
        secure, alice, "sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "SubmitLine"
    )
    assert "API_KEY=s3cret" in out
    code, out, _ = command(secure, bob, "scontrol", "show", "job", str(job_id))
    assert "s3cret" not in out
    secure.client().call("CancelJobs", {"filter": {"jobIds": [str(job_id)]}})


# ---------------------------------------------------------------- operators and administrators


def test_operators_act_on_every_job_and_drain_nodes_users_cannot(
    secure: LocalCluster, users: Users
) -> None:
    alice, bob, op = users.alice, users.bob, users.op
    code, _, err = command(
        secure, bob, "scontrol", "update", "NodeName=node02", "State=DRAIN", "Reason=mine"
    )
    assert code != 0 and "needs an operator" in err
    forged = raw(
        secure,
        bob,
        "UpdateNode",
        {"names": ["node02"], "state": "DRAIN", "reason": "x"},
        headers={"x-corral-user": op.pw_name, "x-corral-uid": str(op.pw_uid)},
    )
    assert forged["error"] == "PermissionDenied"
    code, _, err = command(
        secure, op, "scontrol", "update", "NodeName=node02", "State=DRAIN", "Reason=op test"
    )
    assert code == 0, err
    code, _, err = command(secure, op, "scontrol", "update", "NodeName=node02", "State=RESUME")
    assert code == 0, err
    held = submit_as(secure, users, alice, "-H", "--wrap", "true")
    code, _, err = command(secure, op, "scancel", str(held))
    assert code == 0, err
    secure.wait_state(held, "CANCELLED")


def test_reservations_need_an_administrator(secure: LocalCluster, users: Users) -> None:
    argv = ("scontrol", "create", "reservation", "ReservationName=sec", "StartTime=now")
    argv += ("Duration=5", "Nodes=node02", f"Users={users.alice.pw_name}")
    for pw in (users.bob, users.op):
        code, _, err = command(secure, pw, *argv)
        assert code != 0 and "needs an administrator" in err, (pw.pw_name, err)
    root = pwd.getpwuid(0)
    code, _, err = command(secure, root, *argv)
    assert code == 0, err
    assert raw(secure, root, "DeleteReservation", {"name": "sec"}).get("ok") == {}


def test_only_the_key_owner_can_mint_tokens_and_tokens_are_checked(
    secure: LocalCluster, users: Users
) -> None:
    from client import corral_cmd

    def token(pw: pwd.struct_passwd) -> tuple[int, str, str]:
        def body() -> None:
            sys.argv = ["corral", "token", "--user", "root", "--lifetime", "1h"]
            corral_cmd.main()

        return as_user(pw, body, env={"CORRAL_CONF": str(secure.config_path)})

    code, _, err = token(users.bob)
    assert code != 0 and "cannot read the JWT key" in err
    code, out, err = token(pwd.getpwuid(0))
    assert code == 0 and out.startswith("SLURM_JWT="), err
    good = out.strip().split("=", 1)[1]
    assert secure.tcp_client(token=good).call("GetJobs", {}) is not None
    from corral.auth.tokens import issue

    expired = issue(secure.jwt_key_path.read_bytes(), "root", 60, now=1000.0)
    wrong = issue(b"w" * 32, "root", 3600)
    for bad, why in ((expired, "expired"), (wrong, "invalid token")):
        with pytest.raises(CorralError, match=why):
            secure.tcp_client(token=bad).call("GetJobs", {})


def test_commands_over_tcp_take_a_token_from_slurm_jwt_or_an_owner_only_file(
    secure: LocalCluster, users: Users
) -> None:
    bob, home = users.bob, users.home(users.bob)
    tcp = {"CORRAL_CTLD_SOCKET": ""}  # the HTTP gateway's TCP port, not the socket
    code, _, err = command(secure, bob, "squeue", env=tcp)
    assert code != 0 and "no credential" in err
    token = secure.token(bob.pw_name)  # as `corral token --user bob` prints it
    argv = ("sbatch", "--parsable", "-o", "jwt.out", "--wrap", "id -u")
    code, out, err = command(secure, bob, *argv, cwd=home, env={**tcp, "SLURM_JWT": token})
    assert code == 0, err
    seen = secure.wait_state(int(out.strip()), "COMPLETED", "FAILED")
    assert seen["uid"] == bob.pw_uid
    assert (home / "jwt.out").read_text().strip() == str(bob.pw_uid)
    path = home / "token"
    path.write_text(token)
    os.chown(path, bob.pw_uid, bob.pw_gid)
    for mode, works in ((0o644, False), (0o600, True)):
        path.chmod(mode)
        code, _, err = command(secure, bob, "squeue", env={**tcp, "CORRAL_TOKEN_FILE": str(path)})
        assert (code == 0) is works, (oct(mode), err)
        if not works:
            assert "a token file must be yours and readable by you only" in err


# ---------------------------------------------------------------- files


def test_a_symlinked_output_into_another_users_directory_is_refused(
    secure: LocalCluster, users: Users
) -> None:
    alice, bob = users.alice, users.bob
    target = users.home(alice) / "stolen.out"
    (users.home(bob) / "out-link").symlink_to(target)
    os.lchown(users.home(bob) / "out-link", bob.pw_uid, bob.pw_gid)
    job_id = submit_as(secure, users, bob, "-o", "out-link", "--wrap", "echo gotcha")
    seen = secure.wait_state(job_id, "FAILED", "COMPLETED")
    assert seen["state"] == "JOB_STATE_FAILED"
    assert "cannot set up the job's files" in seen["reason"]
    assert not target.exists()


# ---------------------------------------------------------------- oversize input


def test_oversize_submissions_are_refused_with_the_limit(
    secure: LocalCluster, users: Users
) -> None:
    bob = users.bob
    home = users.home(bob)
    script = home / "job.sh"
    script.write_text("#!/bin/sh\necho $#\n")
    big_args = ["a" * 1000] * 7000  # 7 MB of arguments: too large to send at all
    code, _, err = command(secure, bob, "sbatch", str(script), *big_args, cwd=home)
    assert code != 0 and "the largest part, argv, is 7021001 bytes" in err
    assert "at most 8388608 bytes" in err
    some_args = ["a" * 1000] * 300  # sent, refused by ctld with its limit
    code, _, err = command(secure, bob, "sbatch", str(script), *some_args, cwd=home)
    assert code != 0
    assert "the script's arguments is too large: 300000 bytes, the limit is 262144" in err
    huge = home / "huge.sh"
    huge.write_text("#!/bin/sh\n" + "#" * (5 * 1024 * 1024) + "\n")
    code, _, err = command(secure, bob, "sbatch", str(huge), cwd=home)
    assert code != 0 and "too large" in err and "limit" in err
    assert "invalid JSON" not in err
    # the largest script with a large environment is accepted, launched and run
    big = home / "big.sh"
    big.write_text("#!/bin/sh\necho ran\n" + "#" * (4 * 1024 * 1024 - 100) + "\n")
    env = {f"V{i:03d}": "v" * 1000 for i in range(900)}
    spec = {
        "script": big.read_text(),
        "workDir": str(home),
        "stdoutPattern": "big.out",
        "environment": {"PATH": "/usr/bin:/bin", **env},
    }
    reply = raw(secure, bob, "SubmitJob", {"spec": spec})
    assert "ok" in reply, reply
    done = secure.wait_state(int(reply["ok"]["jobId"]), "COMPLETED", "FAILED", timeout=60)
    assert done["state"] == "JOB_STATE_COMPLETED", done.get("reason")
    assert (home / "big.out").read_text() == "ran\n"


# ---------------------------------------------------------------- daemons


def _node_channel(cluster: LocalCluster, cert: str | None, peer: str = CONTROLLER_CN) -> Any:
    target = f"{cluster.controller_host}:{cluster.node_port}"
    if cert is None:  # no certificate at all: TLS with the CA, as a stranger would
        ca = (cluster.tls_dir / "ca.crt").read_bytes()
        creds = grpc.ssl_channel_credentials(ca)
    else:
        creds = ctls.channel_credentials(str(cluster.tls_dir), cert)
    return grpc.aio.secure_channel(target, creds, options=ctls.channel_options(peer))


async def _code(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_node_calls_need_the_nodes_own_certificate(secure: LocalCluster, users: Users) -> None:
    running = submit_as(secure, users, users.alice, "-w", "node01", "--wrap", "sleep 60")
    secure.wait_state(running, "RUNNING")
    res = pb.NodeResources(cpus=1024)
    done = pb.JobStatusUpdate(job_id=running, kind=pb.JobStatusUpdate.KIND_EXITED)

    async def attempts() -> dict[str, grpc.StatusCode]:
        out: dict[str, grpc.StatusCode] = {}
        async with _node_channel(secure, None) as ch:
            stub = pbg.NodeControllerStub(ch)
            out["register, no cert"] = await _code(
                stub.RegisterNode(
                    pb.RegisterNodeRequest(name="node01", address="1.2.3.4:1", resources=res),
                    timeout=5,
                )
            )
            out["heartbeat, no cert"] = await _code(
                stub.Heartbeat(
                    pb.HeartbeatRequest(name="node01", health=[pb.NodeHealthEvent(reason="x")]),
                    timeout=5,
                )
            )
            out["report, no cert"] = await _code(
                stub.ReportJobStatus(
                    pb.ReportJobStatusRequest(node="node01", updates=[done]), timeout=5
                )
            )
        async with grpc.aio.insecure_channel(f"{secure.controller_host}:{secure.node_port}") as ch:
            stub = pbg.NodeControllerStub(ch)
            out["register, plaintext"] = await _code(
                stub.RegisterNode(
                    pb.RegisterNodeRequest(name="node01", address="1.2.3.4:1"), timeout=5
                )
            )
        async with grpc.aio.insecure_channel(f"{secure.controller_host}:{secure.grpc_port}") as ch:
            stub = pbg.NodeControllerStub(ch)
            out["register, client port"] = await _code(
                stub.RegisterNode(
                    pb.RegisterNodeRequest(name="node01", address="1.2.3.4:1"), timeout=5
                )
            )
        async with _node_channel(secure, "node02") as ch:
            stub = pbg.NodeControllerStub(ch)
            out["register as node01 with node02's cert"] = await _code(
                stub.RegisterNode(
                    pb.RegisterNodeRequest(name="node01", address="1.2.3.4:1", resources=res),
                    timeout=5,
                )
            )
            out["heartbeat as node01 with node02's cert"] = await _code(
                stub.Heartbeat(
                    pb.HeartbeatRequest(name="node01", health=[pb.NodeHealthEvent(reason="x")]),
                    timeout=5,
                )
            )
            out["report node01's job as node01 with node02's cert"] = await _code(
                stub.ReportJobStatus(
                    pb.ReportJobStatusRequest(node="node01", updates=[done]), timeout=5
                )
            )
            # as itself, about a job on node01: accepted and ignored
            out["report node01's job as node02"] = await _code(
                stub.ReportJobStatus(
                    pb.ReportJobStatusRequest(node="node02", updates=[done]), timeout=5
                )
            )
        return out

    codes = asyncio.run(attempts())
    S = grpc.StatusCode
    assert codes["register, no cert"] == S.UNAVAILABLE  # the handshake itself fails
    assert codes["heartbeat, no cert"] == S.UNAVAILABLE
    assert codes["report, no cert"] == S.UNAVAILABLE
    assert codes["register, plaintext"] == S.UNAVAILABLE
    assert codes["register, client port"] == S.UNAUTHENTICATED
    assert codes["register as node01 with node02's cert"] == S.PERMISSION_DENIED
    assert codes["heartbeat as node01 with node02's cert"] == S.PERMISSION_DENIED
    assert codes["report node01's job as node01 with node02's cert"] == S.PERMISSION_DENIED
    assert codes["report node01's job as node02"] == S.OK
    nodes = {n["name"]: n for n in secure.client().call("GetNodes", {})["nodes"]}
    assert not nodes["node01"]["address"].startswith("1.2.3.4")
    assert "drain" not in nodes["node01"]["state"].lower()
    assert job(secure, running)["state"] == "JOB_STATE_RUNNING"
    secure.client().call("CancelJobs", {"filter": {"jobIds": [str(running)]}})
    secure.wait_state(running, "CANCELLED")


def test_noded_takes_launch_and_signal_from_ctld_only(
    secure: LocalCluster, users: Users, tmp_path: pathlib.Path
) -> None:
    victim = submit_as(secure, users, users.alice, "-w", "node01", "--wrap", "sleep 60")
    secure.wait_state(victim, "RUNNING")
    marker = tmp_path / "launched"
    forged = pb.Job(
        job_id=99999,
        uid=0,
        user="root",
        spec=pb.JobSpec(script=f"#!/bin/sh\ntouch {marker}\n", work_dir=str(tmp_path)),
        allocations=[pb.NodeAllocation(node="node01", cpus=1)],
    )
    agent = secure.agent_address("node01")
    steps = job_step_address(secure, "node01")
    rogue = tmp_path / "rogue-ca"
    ctls.create_cluster_certs(str(rogue), "rogue", [])

    async def attempts() -> dict[str, grpc.StatusCode]:
        out: dict[str, grpc.StatusCode] = {}
        kill = pb.SignalJobRequest(job_id=victim, signal=9)
        for label, channel in (
            (
                "agent port, node cert",
                grpc.aio.secure_channel(
                    agent,
                    ctls.channel_credentials(str(secure.tls_dir), "node02"),
                    options=ctls.channel_options("node01"),
                ),
            ),
            (
                "agent port, no cert",
                grpc.aio.secure_channel(
                    agent,
                    grpc.ssl_channel_credentials((secure.tls_dir / "ca.crt").read_bytes()),
                    options=ctls.channel_options("node01"),
                ),
            ),
            ("step port", step_channel(secure, "node01")),
            # a certificate of its own making that says "ctld": the step port asks for none
            (
                "step port, forged ctld cert",
                grpc.aio.secure_channel(
                    steps,
                    grpc.ssl_channel_credentials(
                        (secure.tls_dir / "ca.crt").read_bytes(),
                        (rogue / "ctld.key").read_bytes(),
                        (rogue / "ctld.crt").read_bytes(),
                    ),
                    options=ctls.channel_options("node01"),
                ),
            ),
            ("step port, plaintext", grpc.aio.insecure_channel(steps)),
        ):
            async with channel:
                stub = pbg.NodeAgentStub(channel)
                out[f"launch, {label}"] = await _code(
                    stub.LaunchJob(pb.LaunchJobRequest(job=forged), timeout=5)
                )
                out[f"signal, {label}"] = await _code(stub.SignalJob(kill, timeout=5))
                out[f"reconfigure, {label}"] = await _code(
                    stub.Reconfigure(pb.ReconfigureRequest(), timeout=5)
                )
        return out

    codes = asyncio.run(attempts())
    S = grpc.StatusCode
    assert codes["launch, agent port, node cert"] == S.PERMISSION_DENIED
    assert codes["signal, agent port, node cert"] == S.PERMISSION_DENIED
    assert codes["launch, agent port, no cert"] == S.UNAVAILABLE
    assert codes["signal, agent port, no cert"] == S.UNAVAILABLE
    assert codes["launch, step port"] == S.UNAUTHENTICATED
    assert codes["signal, step port"] == S.UNAUTHENTICATED
    assert codes["launch, step port, forged ctld cert"] == S.UNAUTHENTICATED
    assert codes["signal, step port, forged ctld cert"] == S.UNAUTHENTICATED
    assert codes["launch, step port, plaintext"] == S.UNAVAILABLE  # TLS only
    assert codes["signal, step port, plaintext"] == S.UNAVAILABLE
    # noded's Reconfigure (scontrol reconfigure relayed) is ctld's alone as well
    assert codes["reconfigure, agent port, node cert"] == S.PERMISSION_DENIED
    assert codes["reconfigure, agent port, no cert"] == S.UNAVAILABLE
    assert codes["reconfigure, step port"] == S.UNAUTHENTICATED
    assert codes["reconfigure, step port, forged ctld cert"] == S.UNAUTHENTICATED
    assert codes["reconfigure, step port, plaintext"] == S.UNAVAILABLE
    assert not marker.exists()
    assert job(secure, victim)["state"] == "JOB_STATE_RUNNING"
    secure.client().call("CancelJobs", {"filter": {"jobIds": [str(victim)]}})
    secure.wait_state(victim, "CANCELLED")


def job_step_address(cluster: LocalCluster, name: str) -> str:
    nodes = cluster.client().call("GetNodes", {"names": [name]})["nodes"]
    return str(nodes[0]["address"])


def step_channel(cluster: LocalCluster, name: str) -> Any:
    """A gRPC client without a certificate on node ``name``'s step port (TLS: the
    cluster CA checks the node's certificate)."""
    ca = (cluster.tls_dir / "ca.crt").read_bytes()
    return grpc.aio.secure_channel(
        job_step_address(cluster, name),
        grpc.ssl_channel_credentials(ca),
        options=ctls.channel_options(name),
    )


# ---------------------------------------------------------------- PrivateData


def test_private_data_hides_other_users_jobs(users: Users, cluster_factory: ClusterFactory) -> None:
    c = cluster_factory(
        nodes=1,
        gpus_per_node=0,
        controller_config=(
            f'private_data = ["jobs", "accounting"]\noperators = ["{users.op.pw_name}"]'
        ),
    )
    mine = submit_as(c, users, users.alice, "-H", "--wrap", "true")
    for pw, visible in ((users.bob, False), (users.alice, True), (users.op, True)):
        code, out, err = command(c, pw, "squeue", "-h", "-o", "%i")
        assert code == 0, err
        assert (str(mine) in out.split()) is visible, (pw.pw_name, out)
    code, out, _ = command(c, users.bob, "sacct", "-X", "-n", "-P", "-o", "JobID", "-a")
    assert str(mine) not in out.split()
    # her batch script: no such job to bob (not even "Invalid user id", which says it is)
    write = ("scontrol", "write", "batch_script", str(mine), "-")
    code, out, err = command(c, users.bob, *write)
    assert (code, out, err) == (1, "", "job script retrieval failed: Invalid job id specified\n")
    for pw in (users.alice, users.op):
        code, out, err = command(c, pw, *write)
        assert (code, out) == (
            0,
            "#!/bin/sh\n# This script was created by sbatch --wrap.\n\ntrue\n",
        )


def test_only_the_srun_that_created_a_step_starts_its_tasks(
    secure: LocalCluster, users: Users, tmp_path: pathlib.Path
) -> None:
    # root's job (srun lives in this venv, which other users may not be able to run)
    sbatch = str(pathlib.Path(sys.executable).parent / "sbatch")
    out = subprocess.run(
        [sbatch, "--parsable", "-w", "node01", "--wrap", "srun sleep 30"],
        env=secure.env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    job_id = int(out.strip().split(";")[0])
    seen = wait_for(lambda: (j := job(secure, job_id)).get("steps") and j, 30, "the step")
    step_id = int(seen["steps"][0].get("stepId", 0))

    async def attempt(credential: str) -> tuple[grpc.StatusCode, str]:
        start = pb.RunTasksRequest(
            job=pb.Job(job_id=job_id),
            step=pb.Step(job_id=job_id, step_id=step_id),
            node="node01",
            environment={"LD_PRELOAD": "/tmp/not-alices.so"},
            step_credential=credential,
        )
        async with step_channel(secure, "node01") as channel:
            call = pbg.NodeAgentStub(channel).RunTasks(iter([pb.TaskInput(start=start)]))
            try:
                await call.read()
            except grpc.aio.AioRpcError as exc:
                return exc.code(), exc.details() or ""
        return grpc.StatusCode.OK, ""

    for credential in ("", "0" * 64):
        code, details = asyncio.run(attempt(credential))
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert "step credential does not match" in details
    secure.client().call("CancelJobs", {"filter": {"jobIds": [str(job_id)]}})
    secure.wait_state(job_id, "CANCELLED", "COMPLETED", "FAILED")


def test_client_ports_speak_tls_when_configured(cluster_factory: ClusterFactory) -> None:
    metrics_port = free_port()
    c = cluster_factory(
        nodes=1,
        gpus_per_node=0,
        tls_clients=True,
        controller_config=f"metrics_port = {metrics_port}",
    )
    ca = str(c.tls_dir / "ca.crt")
    assert "corral_nodes" in c.scrape()  # https, with the metrics token
    request = urllib.request.Request(
        f"https://{c.controller_host}:{metrics_port}/metrics",
        headers={"Authorization": f"Bearer {c.metrics_token_path.read_text().strip()}"},
    )
    tls = ssl.create_default_context(cafile=ca)
    with urllib.request.urlopen(request, timeout=10, context=tls) as reply:
        assert b"corral_nodes" in reply.read()  # the metrics port speaks TLS too
    token = c.token(pwd.getpwuid(os.getuid()).pw_name)
    os.environ["CORRAL_CTLD_CA"] = ca
    try:
        nodes = c.tcp_client(token=token).get_nodes({})["nodes"]
        assert [n["name"] for n in nodes] == ["node01"]
    finally:
        del os.environ["CORRAL_CTLD_CA"]
    with pytest.raises(CorralError):  # plaintext to a TLS port gets no answer
        c.tcp_client(token=token).get_nodes({})

    async def grpc_over_tls() -> int:
        creds = grpc.ssl_channel_credentials((c.tls_dir / "ca.crt").read_bytes())
        target = f"127.0.0.1:{c.grpc_port}"
        opts = ctls.channel_options(CONTROLLER_CN)
        async with grpc.aio.secure_channel(target, creds, options=opts) as channel:
            reply = await pbg.ControllerStub(channel).GetNodes(
                pb.GetNodesRequest(), metadata=c.grpc_metadata(), timeout=10
            )
        return len(reply.nodes)

    assert asyncio.run(grpc_over_tls()) == 1


def test_nothing_listens_on_every_interface(secure: LocalCluster) -> None:
    """ctld and each noded bind what the configuration names, never 0.0.0.0 or ::."""
    import psutil

    for name, proc in secure.procs.items():
        top = psutil.Process(proc.pid)  # nsenter/unshare wrap noded in a netns cluster
        listening = [
            c.laddr
            for p in (top, *top.children(recursive=True))
            for c in p.net_connections("inet")
            if c.status == psutil.CONN_LISTEN
        ]
        assert listening, name
        assert not [a for a in listening if a.ip in ("0.0.0.0", "::")], (name, listening)


def test_a_revoked_node_certificate_gets_nothing(
    secure: LocalCluster, tmp_path: pathlib.Path
) -> None:
    """A stolen node certificate (here a second one for node02 from the cluster CA),
    once revoked (corral certs --revoke), can no longer heartbeat as node02; the real
    node02's own certificate still can, and the list is read without a restart."""
    stolen = tmp_path / "stolen"
    stolen.mkdir()
    for name in ("ca.crt", "ca.key"):
        shutil.copy(secure.tls_dir / name, stolen / name)
    ctls.issue(str(stolen), "node02")

    async def heartbeat(directory: pathlib.Path) -> grpc.StatusCode:
        target = f"{secure.controller_host}:{secure.node_port}"
        creds = ctls.channel_credentials(str(directory), "node02")
        options = ctls.channel_options(CONTROLLER_CN)
        async with grpc.aio.secure_channel(target, creds, options=options) as ch:
            stub = pbg.NodeControllerStub(ch)
            return await _code(stub.Heartbeat(pb.HeartbeatRequest(name="node02"), timeout=5))

    S = grpc.StatusCode
    assert asyncio.run(heartbeat(stolen)) == S.OK  # from the CA: good until revoked
    revoked = secure.tls_dir / ctls.REVOKED_FILE
    serial = ctls.revoke(str(stolen), ["node02"])[0]
    shutil.copy(stolen / ctls.REVOKED_FILE, revoked)  # handed to ctld's host
    try:
        assert f"{serial:x} node02" in revoked.read_text()
        assert asyncio.run(heartbeat(stolen)) == S.UNAUTHENTICATED
        assert asyncio.run(heartbeat(secure.tls_dir)) == S.OK  # the real node02's
    finally:
        revoked.unlink()
