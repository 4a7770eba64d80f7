"""deploy/: every Kubernetes manifest is valid against the Kubernetes API's schemas
(kubernetes-validate bundles them: nothing is downloaded), and the compose file has the
structure a compose tool reads (its services from corral's image, ctld and the nodes).
What each Secret holds and what ctld demands of its files: test_deploy_kubernetes.py."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML (pyproject's dev extra)")
kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (dev extra)")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S_VERSION = "1.30.0"  # the oldest Kubernetes these manifests are written for


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        if path.name == "kustomization.yaml":  # kustomize's, not the API's
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return docs


DOCS = _documents()


POD = yaml.safe_load((DEPLOY / "podman" / "corral-pod.yaml").read_text())


@pytest.mark.parametrize(
    "doc", [d for _, d in DOCS] + [POD], ids=[n for n, _ in DOCS] + ["podman:corral-pod"]
)
def test_manifest_is_valid_against_the_api_schema(doc: dict[str, Any]) -> None:
    kv.validate(doc, K8S_VERSION, strict=True)  # strict: an unknown field is an error


def test_the_podman_pod_runs_ctld_as_corral_and_the_nodes_as_root() -> None:
    by_name = {c["name"]: c for c in POD["spec"]["containers"]}
    assert by_name["ctld"]["securityContext"]["runAsUser"] == 990
    for node in ("node01", "node02"):
        assert by_name[node]["args"][-2:] == ["--name", node]
        assert by_name[node]["securityContext"]["runAsUser"] == 0
    config = tomllib.loads((DEPLOY / "podman" / "corral.toml").read_text())
    assert config["noded"]["port"] == 0  # one network for the pod: free ports each


def test_the_manifests_are_the_whole_deployment() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in DOCS}
    assert {
        ("Namespace", "corral"),
        ("ConfigMap", "corral-config"),
        ("Service", "corral-ctld"),
        ("StatefulSet", "corral-ctld"),
        ("DaemonSet", "corral-noded"),
    } <= kinds
    for _, doc in DOCS:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "corral"


def _by_kind(kind: str) -> dict[str, Any]:
    return next(d for _, d in DOCS if d["kind"] == kind)


def test_ctld_is_non_root_with_a_persistent_store() -> None:
    sts = _by_kind("StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 990  # the image's corral user
    assert pod["containers"][0]["args"][0] == "ctld"
    claims = [c["metadata"]["name"] for c in sts["spec"]["volumeClaimTemplates"]]
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["state"] == "/var/lib/corral" and "state" in claims
    assert sts["spec"]["serviceName"] == _by_kind("Service")["metadata"]["name"]


def test_noded_takes_the_gpus_from_the_device_plugin() -> None:
    ds = _by_kind("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    noded = pod["containers"][0]
    assert noded["args"][0] == "noded" and "$(NODE_NAME)" in noded["args"]
    assert int(noded["resources"]["limits"]["nvidia.com/gpu"]) > 0
    assert pod["nodeSelector"]["corral.dev/node"] == "true"
    assert noded["securityContext"]["runAsUser"] == 0  # it starts jobs as their users
    assert ds["spec"]["updateStrategy"]["type"] == "OnDelete"


def test_the_config_map_is_a_valid_corral_config() -> None:
    text = _by_kind("ConfigMap")["data"]["corral.toml"]
    config = tomllib.loads(text)
    assert config["controller"]["host"].startswith("corral-ctld-0.corral-ctld.")
    assert config["tls"]["dir"] == "/etc/corral/tls"


def test_no_secret_ships_in_the_manifests() -> None:
    # secrets.sh makes them from the admin's `corral certs` (test_deploy_kubernetes.py):
    # a shell applied over them would be all a careless `kubectl apply` keeps
    assert not [name for name, doc in DOCS if doc["kind"] == "Secret"]


def test_compose_file_structure() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"ctld", "node01", "node02"}
    assert services["ctld"]["command"][0] == "ctld"
    for name in ("node01", "node02"):
        svc = services[name]
        assert svc["command"][:1] == ["noded"] and svc["command"][-1] == name
        assert svc["hostname"] == name and svc["user"] == "root"
        assert svc["depends_on"] == ["ctld"]
    for svc in services.values():
        assert svc["image"] == "localhost/corral:dev"
        assert set(svc["networks"]) <= set(compose["networks"])
        for volume in svc["volumes"]:
            source = volume.split(":")[0]
            assert source.startswith("./") or source in compose["volumes"], volume
    config = tomllib.loads((DEPLOY / "compose" / "corral.toml").read_text())
    assert config["controller"]["host"] == "ctld"
