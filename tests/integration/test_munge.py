"""MUNGE authentication against a real munged of the test's own (temporary key, socket,
pid file), and a cluster with ``auth.type = "munge"`` used over TCP by a real second user.

munge is a test requirement, never skipped: .ci/run installs the package.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from corral.auth import munge
from corral.errors import CorralError, PermissionDenied
from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from corral.testing.munge import Munged
from corral.testing.munge import available as munge_available
from tests.integration.realusers import Users, as_user, job, raw

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def munged() -> Iterator[Munged]:
    if not munge_available():  # a failure, not a skip: CI installs munge
        pytest.fail("munged is not installed: apt-get install munge (.ci/run installs it)")
    daemon = Munged()
    try:
        yield daemon
    finally:
        daemon.stop()


def test_credentials_carry_the_caller_and_are_good_once(munged: Munged) -> None:
    verifier = munge.Verifier(munged.socket, ttl_s=60)
    cred = munge.encode(b"corral:SubmitJob", munged.socket)
    assert verifier.verify(cred, b"corral:SubmitJob") == (os.getuid(), os.getgid())
    with pytest.raises(PermissionDenied, match=r"[Rr]eplayed"):
        verifier.verify(cred, b"corral:SubmitJob")
    other = munge.encode(b"corral:GetJobs", munged.socket)
    with pytest.raises(PermissionDenied, match="another call"):
        verifier.verify(other, b"corral:SubmitJob")
    late = munge.encode(b"corral:GetJobs", munged.socket)
    with pytest.raises(PermissionDenied, match="expired"):
        verifier.verify(late, b"corral:GetJobs", now=time.time() + 3600)
    with pytest.raises(PermissionDenied, match="munge"):
        verifier.verify("MUNGE:not-a-credential:", b"")


def test_a_credential_from_another_key_is_refused(munged: Munged) -> None:
    rogue = Munged()
    try:
        forged = munge.encode(b"corral:SubmitJob", rogue.socket)
        with pytest.raises(PermissionDenied, match="munge"):
            munge.Verifier(munged.socket).verify(forged, b"corral:SubmitJob")
    finally:
        rogue.stop()


@pytest.fixture(scope="module")
def munge_cluster(munged: Munged, module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(
        nodes=1, gpus_per_node=0, auth_type="munge", munge_socket=munged.socket
    )


def test_a_user_submits_over_tcp_with_munge(
    munge_cluster: LocalCluster, munged: Munged, users: Users, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corral.api import HttpController as Client

    bob = users.bob
    host, _, port = munge_cluster.http_address.rpartition(":")
    env = {"CORRAL_AUTH_TYPE": "munge", "CORRAL_MUNGE_SOCKET": munged.socket}
    spec = {
        "script": "#!/bin/sh\nid -u > munge.out\n",
        "workDir": str(users.home(bob)),
        "environment": {"PATH": "/usr/bin:/bin"},
    }

    def submit() -> None:
        os.environ.update(env)
        client = Client((host, int(port)), socket_path="")
        # forged claims ride along; the credential decides
        original = client.headers
        client.headers = lambda m: [*original(m), ("x-corral-uid", "0")]  # type: ignore[method-assign]
        print(client.call("SubmitJob", {"spec": spec})["jobId"])

    code, out, err = as_user(bob, submit)
    assert code == 0, err
    seen = munge_cluster.wait_state(int(out), "COMPLETED", "FAILED")
    assert (seen["user"], seen["uid"]) == (bob.pw_name, bob.pw_uid)
    assert (users.home(bob) / "munge.out").read_text().strip() == str(bob.pw_uid)
    # no credential over TCP: refused; the Unix socket still works for everyone
    monkeypatch.setenv("CORRAL_AUTH_TYPE", "none")
    with pytest.raises(CorralError, match="no credential"):
        Client((host, int(port)), socket_path="").call("GetJobs", {})
    assert raw(munge_cluster, bob, "GetJobs", {}).get("ok") is not None
    assert job(munge_cluster, int(out))["uid"] == bob.pw_uid
