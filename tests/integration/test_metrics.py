"""ctld's /metrics read from a real ctld with real nodeds (issue 26): every family
exported, its type, its labels and its values after real jobs; counters that only go
up (an end still counted once ctld has forgotten the job); the Grafana dashboard in
deploy/ names only metrics ctld exports."""

from __future__ import annotations

import json
import pathlib
import re
import urllib.error
import urllib.request
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory
from corral.testing.harness import wait_for
from tests.conftest import Commands

pytestmark = pytest.mark.timeout(240)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "corral-dashboard.json"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"

# every family ctld exports, and its type
FAMILIES = {
    "corral_jobs": "gauge",
    "corral_jobs_pending": "gauge",
    "corral_jobs_submitted": "counter",
    "corral_jobs_ended": "counter",
    "corral_job_wait_seconds": "histogram",
    "corral_job_run_seconds": "histogram",
    "corral_sched_pass_seconds": "gauge",
    "corral_sched_jobs_considered": "gauge",
    "corral_sched_passes": "counter",
    "corral_job_starts": "counter",
    "corral_job_starts_at_submit": "counter",
    "corral_nodes": "gauge",
    "corral_node_state": "gauge",
    "corral_node_healthy": "gauge",
    "corral_node_cpus": "gauge",
    "corral_node_cpus_allocated": "gauge",
    "corral_node_memory_bytes": "gauge",
    "corral_node_memory_allocated_bytes": "gauge",
    "corral_node_gpus": "gauge",
    "corral_node_gpus_allocated": "gauge",
    "corral_gpus": "gauge",
    "corral_gpu_allocated": "gauge",
    "corral_gpu_utilization_ratio": "gauge",
    "corral_gpu_memory_used_bytes": "gauge",
    "corral_gpu_memory_bytes": "gauge",
    "corral_gpu_healthy": "gauge",
    "corral_user_jobs": "gauge",
    "corral_user_gpus": "gauge",
    "corral_user_gpu_seconds": "counter",
    "corral_store_commits": "counter",
    "corral_store_up": "gauge",
    "corral_store_outages": "counter",
    "corral_store_free_bytes": "gauge",
    "corral_mails": "counter",
    "corral_mail_attempts_failed": "counter",
    "corral_mail_queue": "gauge",
    "corral_masked_queries": "counter",
    "corral_node_power_state": "gauge",
    "corral_node_powered_down_seconds": "counter",
    "corral_node_energy_saved_joules": "counter",
    "corral_partition_powered_down_seconds": "counter",
    "corral_partition_energy_saved_joules": "counter",
    "corral_power_resumes": "counter",
    "corral_power_suspends": "counter",
    "corral_power_resume_failures": "counter",
}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def scrape(c: LocalCluster) -> dict[str, Any]:
    """As Prometheus scrapes: with the bearer token of controller.metrics_token_file."""
    return {f.name: f for f in text_string_to_metric_families(c.scrape())}


def value(families: dict[str, Any], name: str, **labels: str) -> float | None:
    base = re.sub(r"_(total|bucket|sum|count)$", "", name)
    family = families.get(name) or families.get(base)
    for s in family.samples if family else ():
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    return None


def exported_names(families: dict[str, Any]) -> set[str]:
    names = set()
    for name, family in families.items():
        names.update(name + sfx for sfx in SUFFIXES.get(family.type, ("",)))
    return names


def fake_gpus(c: LocalCluster, node: str, state: dict[str, Any]) -> None:
    path = c.state_dir / "spool" / node / "fake-gpus.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


def test_every_metric_from_a_real_ctld(
    tmp_path: pathlib.Path, cluster_factory: ClusterFactory
) -> None:
    c = cluster_factory(
        nodes=2, gpus_per_node=4, controller_config="min_job_age_s = 1.0", heartbeat_interval_s=1.0
    )
    # Prometheus sends the token of controller.metrics_token_file (c.scrape); a scrape
    # without it is refused before a series is read
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://{c.http_address}/metrics", timeout=10)
    assert refused.value.code == 401
    assert refused.value.headers["WWW-Authenticate"].startswith("Bearer")
    # deploy/'s Prometheus example scrapes as ctld expects: its type, the file's token
    job = yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"][0]
    auth = job["authorization"]
    assert auth["credentials_file"] and job.get("metrics_path", "/metrics") == "/metrics"
    token = c.metrics_token_path.read_text().strip()  # Prometheus trims the file's content
    request = urllib.request.Request(
        f"http://{c.http_address}/metrics", headers={"Authorization": f"{auth['type']} {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 200 and b"corral_nodes" in reply.read()
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    fake_gpus(c, "node02", {"util": {"1": 55}, "memory_used_mb": {"1": 2048}, "lost": [3]})
    gpu = cmd(
        "sbatch", "--parsable", "--gres=gpu:2", "-w", "node01", "--wrap", "sleep 3"
    ).stdout.strip()
    fail = cmd("sbatch", "--parsable", "--wrap", "exit 3").stdout.strip()
    held = cmd("sbatch", "--parsable", "-H", "--wrap", "true").stdout.strip()
    c.wait_state(gpu, "RUNNING")

    def running_view() -> dict[str, Any] | None:
        f = scrape(c)
        ready = value(f, "corral_gpu_utilization_ratio", node="node02", gpu="1") == 0.55
        return f if ready and value(f, "corral_user_gpus", user="root") == 2 else None

    f = wait_for(running_view, 30, "the heartbeat's GPU figures and the GPU job")
    for name, kind in FAMILIES.items():
        assert name in f, f"{name} is not exported"
        assert f[name].type == kind, f"{name} is a {f[name].type}, not a {kind}"
    assert value(f, "corral_jobs", state="RUNNING") == 1
    assert value(f, "corral_jobs", state="PENDING") == 1
    assert value(f, "corral_jobs", state="COMPLETED") is None  # ends are counted, not held
    # a job submitted without -A is charged to the user's default account (root here)
    assert value(f, "corral_user_jobs", user="root", account="root", state="PENDING") == 1
    assert value(f, "corral_node_gpus_allocated", node="node01") == 2
    assert value(f, "corral_node_gpus", node="node01") == 4
    assert value(f, "corral_node_cpus", node="node01") == 16
    assert value(f, "corral_node_cpus_allocated", node="node01") == 1
    assert value(f, "corral_node_memory_bytes", node="node01") == 64 * 1024 * 2**20
    assert value(f, "corral_node_healthy", node="node01") == 1
    assert value(f, "corral_node_state", node="node01", state="MIXED") == 1
    held_gpus = [
        s.labels["gpu"]
        for s in f["corral_gpu_allocated"].samples
        if s.labels["node"] == "node01" and s.value == 1
    ]
    assert len(held_gpus) == 2
    assert value(f, "corral_gpu_memory_used_bytes", node="node02", gpu="1") == 2048 * 2**20
    assert value(f, "corral_gpu_memory_bytes", node="node02", gpu="1") == 81559 * 2**20
    assert value(f, "corral_gpu_healthy", node="node02", gpu="1") == 1
    assert value(f, "corral_gpu_healthy", node="node02", gpu="3") == 0  # lost: fault
    assert value(f, "corral_gpus", partition="debug", use="allocated") == 2
    assert value(f, "corral_store_up") == 1
    assert (value(f, "corral_store_free_bytes") or 0) > 0  # SQLite: its filesystem's space
    first = value(f, "corral_user_gpu_seconds_total", user="root", account="root")
    assert first is not None and first > 0

    c.wait_state(gpu, "COMPLETED")
    c.wait_state(fail, "FAILED")
    cmd("scancel", held)
    f = scrape(c)
    assert value(f, "corral_jobs_ended_total", partition="debug", state="COMPLETED") == 1
    assert value(f, "corral_jobs_ended_total", partition="debug", state="FAILED") == 1
    assert value(f, "corral_jobs_ended_total", partition="debug", state="CANCELLED") == 1
    assert value(f, "corral_jobs_submitted_total", partition="debug") == 3
    assert value(f, "corral_job_wait_seconds_count", partition="debug") == 2
    assert value(f, "corral_job_run_seconds_count", partition="debug") == 2
    assert value(f, "corral_job_run_seconds_bucket", partition="debug", le="+Inf") == 2
    gpu_seconds = value(f, "corral_user_gpu_seconds_total", user="root", account="root")
    assert gpu_seconds is not None and 5.0 <= gpu_seconds <= 2 * 3 + 4.0  # 2 GPUs x ~3 s
    commits = value(f, "corral_store_commits_total")

    # ctld forgets finished jobs (min_job_age_s, its purge every 30 s): the counters not
    wait_for(lambda: not cmd("squeue", "-h", "-t", "all").stdout.strip(), 60, "the purge")
    f = scrape(c)
    assert value(f, "corral_jobs_ended_total", partition="debug", state="COMPLETED") == 1
    assert value(f, "corral_user_gpu_seconds_total", user="root", account="root") == gpu_seconds
    assert (value(f, "corral_store_commits_total") or 0) >= (commits or 0)

    # the dashboard charts only what ctld exports
    names = exported_names(f)
    dash = json.loads(DASHBOARD.read_text())
    assert dash["panels"], "an empty dashboard"
    for panel in dash["panels"]:
        for target in panel["targets"]:
            used = set(re.findall(r"\b(corral_[a-z_]+)\b", target["expr"]))
            assert used, f"panel {panel['title']!r}: no corral metric in {target['expr']!r}"
            assert used <= names, f"panel {panel['title']!r} names {used - names}"
