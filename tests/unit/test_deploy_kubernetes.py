"""deploy/kubernetes as a cluster would run it: rendered by kustomize (kubectl's, from
the OS), the Secrets made by deploy/kubernetes/secrets.sh from a real ``corral certs``
directory, every document valid against the API schemas, each Secret holding only
what its pods need, and ctld's files laid out as the kubelet lays out its volumes, then
checked by ctld's own code as ctld's user (issue 36: the StatefulSet once mounted the
JWT key 0440 and a 0777 socket directory, both of which ctld refuses, and one Secret
with the CA's key went to every node).

The kubelet's rules modelled here (kubernetes pkg/volume): a Secret's or ConfigMap's
files are root's with ``defaultMode`` (0644 unless set), and under the pod's
``fsGroup`` group fsGroup's with 0440 added (read-only volumes: SetVolumeOwnership's
mask); an emptyDir is root's 0777 (under fsGroup: group fsGroup, setgid); a fresh
persistent volume is root's 0755 (under fsGroup: group fsGroup, 0660|0110 added,
setgid). What is not a volume is the image's (scripts/build-image.sh)."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from typing import Any

import pytest

from corral.hostlist import expand

yaml = pytest.importorskip("yaml", reason="PyYAML (pyproject's dev extra)")
kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (dev extra)")

pytestmark = pytest.mark.timeout(120)

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.30.0"
CTLD_UID = 990  # the image's corral (scripts/build-image.sh)
# the image's own directories on the way to ctld's files: (uid, gid, mode)
IMAGE_DIRS = {"/run": (0, 0, 0o755), "/run/corral": (CTLD_UID, CTLD_UID, 0o755)}


def _kubectl() -> str:
    exe = shutil.which("kubectl")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is missing (.ci/run installs it)")
        pytest.skip("needs kubectl (kustomize and Secrets offline)")
    return exe


def _rendered() -> list[dict[str, Any]]:
    out = subprocess.run(
        [_kubectl(), "kustomize", str(KUBE)], capture_output=True, text=True, check=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return _rendered()


@pytest.fixture(scope="module")
def config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return tomllib.loads(_one(docs, "ConfigMap")["data"]["corral.toml"])


@pytest.fixture(scope="module")
def certs(config: dict[str, Any]) -> Iterator[pathlib.Path]:
    """What the admin host has: ``corral certs`` for the ConfigMap's nodes, a JWT key."""
    from corral.auth.tls import create_cluster_certs
    from corral.auth.tokens import write_key

    base = pathlib.Path(tempfile.mkdtemp(prefix="corral-k8s-certs-"))
    nodes = [n for entry in config["nodes"] for n in expand(entry["names"])]
    create_cluster_certs(str(base / "tls"), "k8s", nodes, [config["controller"]["host"]])
    (base / "tls" / "revoked").write_text("")
    write_key(str(base / "jwt.key"))
    yield base
    shutil.rmtree(base)


@pytest.fixture(scope="module")
def secrets(certs: pathlib.Path) -> dict[str, dict[str, bytes]]:
    """The Secrets secrets.sh prints, by name: each key's bytes."""
    out = subprocess.run(
        [str(KUBE / "secrets.sh"), str(certs / "tls"), str(certs / "jwt.key")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    made = {}
    for doc in yaml.safe_load_all(out):
        if doc:
            kv.validate(doc, K8S_VERSION, strict=True)
            assert doc["metadata"]["namespace"] == "corral"
            data = doc.get("data") or {}
            made[doc["metadata"]["name"]] = {k: base64.b64decode(v) for k, v in data.items()}
    return made


def test_the_rendered_manifests_are_valid(docs: list[dict[str, Any]]) -> None:
    assert {d["kind"] for d in docs} == {
        "Namespace",
        "ConfigMap",
        "Service",
        "StatefulSet",
        "DaemonSet",
    }
    for doc in docs:
        kv.validate(doc, K8S_VERSION, strict=True)


def test_secrets_sh_refuses_a_directory_without_certificates(tmp_path: pathlib.Path) -> None:
    (tmp_path / "jwt.key").write_bytes(b"k" * 32)
    res = subprocess.run(
        [str(KUBE / "secrets.sh"), str(tmp_path), str(tmp_path / "jwt.key")],
        capture_output=True,
        text=True,
    )
    assert res.returncode != 0 and res.stdout == ""
    assert "ca.crt" in res.stderr and "corral certs" in res.stderr


def _private_keys(files: dict[str, bytes]) -> set[str]:
    return {name for name, body in files.items() if b"PRIVATE KEY" in body}


def test_each_secret_holds_what_its_pods_need_and_no_ca_key(
    secrets: dict[str, dict[str, bytes]], certs: pathlib.Path, config: dict[str, Any]
) -> None:
    tls = certs / "tls"
    nodes = [n for entry in config["nodes"] for n in expand(entry["names"])]
    assert set(secrets) == {"corral-ctld-tls", "corral-jwt", "corral-node-tls"}
    assert set(secrets["corral-ctld-tls"]) == {"ca.crt", "ctld.crt", "ctld.key", "revoked"}
    assert set(secrets["corral-jwt"]) == {"jwt.key"}
    assert secrets["corral-jwt"]["jwt.key"] == (certs / "jwt.key").read_bytes()
    node_files = {f"{n}.{ext}" for n in nodes for ext in ("crt", "key")}
    assert set(secrets["corral-node-tls"]) == {"ca.crt", "revoked"} | node_files
    # the nodes' Secret holds no private key but the nodes' own (no CA's, no ctld's)
    assert _private_keys(secrets["corral-node-tls"]) == {f"{n}.key" for n in nodes}
    assert _private_keys(secrets["corral-ctld-tls"]) == {"ctld.key"}
    ca_key = (tls / "ca.key").read_bytes()
    ctld_key = (tls / "ctld.key").read_bytes()
    for name, files in secrets.items():
        for key, body in files.items():
            assert body != ca_key, f"the CA's private key is in {name} as {key}"
            assert key == "jwt.key" or body == (tls / key).read_bytes()
        if name != "corral-ctld-tls":
            assert ctld_key not in files.values(), f"ctld's key is in {name}"


def _secret_mounts(workload: dict[str, Any]) -> set[str]:
    pod = workload["spec"]["template"]["spec"]
    return {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}


def test_the_nodes_mount_only_the_nodes_secret(
    docs: list[dict[str, Any]], secrets: dict[str, dict[str, bytes]]
) -> None:
    assert _secret_mounts(_one(docs, "DaemonSet")) == {"corral-node-tls"}
    assert _secret_mounts(_one(docs, "StatefulSet")) == {"corral-ctld-tls", "corral-jwt"}


# ---------------------------------------------------------------- ctld's files, laid out


def _chown(path: pathlib.Path, uid: int, gid: int, mode: int) -> None:
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, mode)


def _lay_out_volume(
    volume: dict[str, Any],
    target: pathlib.Path,
    sub_path: str,
    fs_group: int | None,
    secrets: dict[str, dict[str, bytes]],
    configmaps: dict[str, dict[str, str]],
) -> None:
    """``volume`` at ``target`` (a subPath: that one file), as the kubelet makes it."""
    group = fs_group if fs_group is not None else 0
    setgid = 0o2000 if fs_group is not None else 0
    if "secret" in volume or "configMap" in volume:
        source = volume.get("secret") or volume["configMap"]
        if "secret" in volume:
            files = secrets[source["secretName"]]
        else:
            files = {k: v.encode() for k, v in configmaps[source["name"]].items()}
        mode = source.get("defaultMode", 0o644) | (0o440 if fs_group is not None else 0)
        if sub_path:
            target.write_bytes(files[sub_path])
            _chown(target, 0, group, mode)
            return
        target.mkdir()
        for key, body in files.items():
            (target / key).write_bytes(body)
            _chown(target / key, 0, group, mode)
        _chown(target, 0, group, 0o1777 | setgid)  # a tmpfs of the kubelet's
    elif "emptyDir" in volume:
        target.mkdir()
        _chown(target, 0, group, 0o777 | setgid)
    elif "persistentVolumeClaim" in volume or "claim" in volume:
        target.mkdir()
        _chown(target, 0, group, 0o755 | (0o770 | setgid if fs_group is not None else 0))
    else:
        raise AssertionError(f"a volume this model does not know: {volume}")


def _lay_out_pod(
    workload: dict[str, Any],
    root: pathlib.Path,
    secrets: dict[str, dict[str, bytes]],
    configmaps: dict[str, dict[str, str]],
) -> None:
    pod = workload["spec"]["template"]["spec"]
    fs_group = pod.get("securityContext", {}).get("fsGroup")
    volumes = {v["name"]: v for v in pod["volumes"]}
    for claim in workload["spec"].get("volumeClaimTemplates", []):
        volumes[claim["metadata"]["name"]] = {"claim": claim["metadata"]["name"]}
    for path, (uid, gid, mode) in IMAGE_DIRS.items():
        (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        _chown(root / path.lstrip("/"), uid, gid, mode)
    laid: dict[str, str] = {}  # volume -> where it was laid out first
    for container in pod.get("initContainers", []) + pod["containers"]:
        for mount in container.get("volumeMounts", []):
            target = root / mount["mountPath"].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            name, sub = mount["name"], mount.get("subPath", "")
            if mount["mountPath"] in IMAGE_DIRS and mount["mountPath"] not in laid.values():
                target.rmdir()  # a volume over the image's directory hides it
            if target.exists() or target.is_symlink():
                assert laid.get(name) == mount["mountPath"], f"two volumes at {target}"
            elif name in laid and not sub:  # the same volume again, elsewhere
                target.symlink_to(root / laid[name].lstrip("/"))
            else:
                _lay_out_volume(volumes[name], target, sub, fs_group, secrets, configmaps)
                laid.setdefault(name, mount["mountPath"])


def _run_init_containers(workload: dict[str, Any], root: pathlib.Path) -> None:
    """Each init container's command, run here as its user, its paths under ``root``."""
    pod = workload["spec"]["template"]["spec"]
    context = pod.get("securityContext", {})
    for init in pod.get("initContainers", []):
        mine = {**context, **init.get("securityContext", {})}
        argv = [str(root / a.lstrip("/")) if a.startswith("/") else a for a in init["command"]]
        res = subprocess.run(
            argv,
            user=mine["runAsUser"],
            group=mine["runAsGroup"],
            extra_groups=[context["fsGroup"]] if "fsGroup" in context else [],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert res.returncode == 0, f"init container {init['name']}: {res.stderr}"


def _ctld_checks(root: pathlib.Path, config: dict[str, Any], uid: int, groups: list[int]) -> str:
    """ctld's own checks of its files, in a child that is ctld's user: "" or why not."""
    import grpc  # noqa: F401  (imported before the child drops to ctld's user)

    from corral.auth import tls, tokens
    from ctld.daemon import sockdir

    def under(path: str) -> str:
        return str(root / path.lstrip("/"))

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: ctld's user, as the pod's securityContext makes it
        why = ""
        try:
            os.setgroups(groups)
            os.setgid(groups[0])
            os.setuid(uid)
            tokens.read_key(under(config["auth"]["jwt_key"]))
            tls.server_credentials(under(config["tls"]["dir"]), "ctld")
            address = sockdir.prepare(under(config["controller"]["socket"]), uid)
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(address)
            state = pathlib.Path(under(config["controller"]["state_dir"]))
            (state / "ctld.db").write_bytes(b"")
        except Exception as exc:  # every refusal goes back to the test
            why = f"{type(exc).__name__}: {exc}"
        os.write(write_end, json.dumps(why).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        answer = f.read()
    os.waitpid(pid, 0)
    return str(json.loads(answer))


def test_ctld_accepts_its_files_as_the_kubelet_lays_them_out(
    docs: list[dict[str, Any]], secrets: dict[str, dict[str, bytes]], config: dict[str, Any]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("lays files out as root and checks them as ctld's user")
    sts = _one(docs, "StatefulSet")
    context = sts["spec"]["template"]["spec"]["securityContext"]
    assert context["runAsUser"] == CTLD_UID and context["runAsNonRoot"] is True
    configmaps = {"corral-config": _one(docs, "ConfigMap")["data"]}
    root = pathlib.Path(tempfile.mkdtemp(prefix="corral-k8s-pod-"))
    try:
        root.chmod(0o755)
        _lay_out_pod(sts, root, secrets, configmaps)
        _run_init_containers(sts, root)
        groups = [context["runAsGroup"], *([context["fsGroup"]] if "fsGroup" in context else [])]
        assert _ctld_checks(root, config, context["runAsUser"], groups) == ""
    finally:
        shutil.rmtree(root)


def test_the_image_makes_ctlds_socket_directory() -> None:
    # IMAGE_DIRS above is what scripts/build-image.sh makes
    script = (ROOT / "scripts" / "build-image.sh").read_text()
    assert "install -d -o corral -g corral -m 0755 /run/corral" in script
