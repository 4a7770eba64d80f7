"""A second local user against what lets a restarted noded take jobs over (issue 35):
the supervisors' sockets, the records and requests in the spool (a step's request holds
its credential), and srun's RESUME of a step whose stream broke.

bob runs on the same nodes as alice. alice's step runs an srun task that prints a line
every quarter second; bob tries to reach her supervisors, to read her step's recorded
request, and to RESUME her step's stream (while it runs, and in the window after its
noded was killed and started again, racing her own srun). Nothing of hers reaches him,
and her step runs on, whole.
"""

from __future__ import annotations

import encodings.idna  # noqa: F401  (a child that became bob cannot load it: /root)
import json
import os
import socket
import threading
import time
from typing import Any

import pytest

from corral import stepstream as ss
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from tests.conftest import wait_for
from tests.integration.realusers import Users, as_user, command

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def lab(users: Users, module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(
        nodes=2, gpus_per_node=0, heartbeat_interval_s=1.0, heartbeat_timeout_s=8.0
    )


class AliceStep:
    """alice's srun (an allocation and its step: one task on node02 printing a numbered
    line every quarter second), run as her in a thread; its output when it is done."""

    def __init__(self, lab: LocalCluster, users: Users) -> None:
        self.result: tuple[int, str, str] | None = None
        home = users.home(users.alice)
        loop = "for i in $(seq 1 120); do echo line $i; sleep 0.25; done"

        def run() -> None:
            self.result = command(
                lab, users.alice, "srun", "-w", "node02", "-N1", "sh", "-c", loop, cwd=home
            )

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

        def running() -> int | None:
            jobs = lab.client().get_jobs({}).get("jobs", [])
            for job in jobs:
                if job.get("steps") and job["state"] == "JOB_STATE_RUNNING":
                    return int(job["jobId"])
            return None

        self.job_id = wait_for(running, 30, "alice's step running")

    def output(self) -> tuple[int, str, str]:
        self.thread.join(120)
        assert self.result is not None, "alice's srun did not end"
        return self.result


def _resume_as(users: Users, pw: Any, address: str, body: dict[str, Any]) -> str:
    """A RESUME of alice's step with a guessed credential, as ``pw``: noded's answer."""

    def attempt() -> None:
        host, port, _ = ss.split_address(address)
        with socket.create_connection((host, port), timeout=10) as sock:
            hello = sock.recv(4096)
            nonce = hello[ss.HEADER.size + len(ss.MAGIC) :]
            sock.sendall(ss.resume_frame("guessed-" + os.urandom(8).hex(), nonce, body))
            data = b""
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            print(data[ss.HEADER.size :].decode(errors="replace"))

    code, out, err = as_user(pw, attempt)
    assert code == 0, err
    return out


def test_bob_reaches_no_supervisor_no_request_and_resumes_no_step_of_alices(
    lab: LocalCluster, users: Users
) -> None:
    alice = AliceStep(lab, users)
    job_id = alice.job_id
    spool = lab.state_dir / "spool" / "node02"
    state = spool / "state"
    # what a restarted noded would take over: the step's request (its credential in it)
    wait_for(lambda: list(state.glob("tasks*.pb")), 20, "the step's record")
    requests = sorted(p.name for p in state.glob("tasks*.pb"))
    sockets = sorted(str(p) for p in (state / "sup").glob("*.sock"))
    assert sockets
    assert f"{job_id:08d}" in requests[0]

    def snoop() -> None:
        found: dict[str, str] = {}
        for path in [str(state), *(str(state / r) for r in requests), *sockets]:
            try:
                if path.endswith(".sock"):
                    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                        s.connect(path)
                    found[path] = "connected"
                elif os.path.isdir(path):
                    found[path] = ",".join(os.listdir(path))
                else:
                    found[path] = open(path, "rb").read().hex()[:20]  # noqa: SIM115
            except OSError as exc:
                found[path] = f"refused: {exc.strerror}"
        print(json.dumps(found))

    code, said, err = as_user(users.bob, snoop)
    assert code == 0, err
    for path, what in json.loads(said).items():
        assert what.startswith("refused"), f"bob got at {path}: {what}"

    node = lab.job(job_id)["steps"][0]["nodes"][0]
    body = {"jobId": job_id, "stepId": 0, "node": "node02"}
    answer = _resume_as(users, users.bob, node["streamAddress"], body)
    assert "credential does not match" in answer, answer

    # alice's noded dies and comes back: bob races her srun for the step's stream
    lab.kill_process("node02")
    lab.start_node(1)
    raced: list[str] = []

    def race() -> None:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            raced.append(_resume_as(users, users.bob, node["streamAddress"], body))

    racer = threading.Thread(target=race)
    racer.start()
    racer.join(30)
    assert raced and all("does not match" in a or "runs no tasks" in a for a in raced), raced
    code, out, err = alice.output()
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("line ")]
    assert lines == [f"line {i}" for i in range(1, 121)], lines[-3:]
