"""deploy/prometheus/corral-alerts.yml: Prometheus's own promtool accepts the rules and
passes their unit tests (corral-alerts.test.yml); every metric an expression names is
one ctld exports (read from ctld's collector over a real store and state, in this
process: /metrics itself may want a token); every alert says how bad it is and links a
runbook of docs/operations.md that exists."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from corral.testing.inprocess import InProcessCluster
from ctld.telemetry.metrics import ClusterCollector
from ctld.telemetry.metrics_text import exposition

ROOT = pathlib.Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "corral-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "corral-alerts.test.yml"
RUNBOOKS = ROOT / "docs" / "operations.md"
PROMETHEUS_OWN = {"up"}  # what Prometheus records of every scrape, not ctld's
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but promtool is missing (Debian's prometheus package: .ci/run)")
        pytest.skip("no promtool (Debian: apt-get install prometheus)")
    return found


def alerts() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_the_example_prometheus_config_loads_the_rules() -> None:
    config = yaml.safe_load((RULES.parent / "prometheus.yml").read_text())
    assert RULES.name in config["rule_files"]
    assert {job["job_name"] for job in config["scrape_configs"]} == {"corral"}  # as `up` reads


def test_promtool_checks_the_rules_and_passes_their_tests() -> None:
    tool = promtool()
    check = subprocess.run(
        [tool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in check.stdout
    tests = subprocess.run(
        [tool, "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr


def exported(c: InProcessCluster) -> set[str]:
    """The sample names ctld's collector exports, over a real store and state."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(c.cluster))
    names = set()
    for family in text_string_to_metric_families(exposition(registry).decode()):
        names.update(family.name + sfx for sfx in SUFFIXES.get(family.type, ("",)))
    return names


def test_every_metric_an_alert_names_is_one_ctld_exports(
    inprocess_cluster: InProcessCluster,
) -> None:
    names = exported(inprocess_cluster)
    assert "corral_store_up" in names and "corral_store_free_bytes" in names
    for rule in alerts():
        expr = str(rule["expr"])
        # identifiers followed by { or a space/paren/bracket, minus PromQL's own words
        used = set(re.findall(r"\b(corral_[a-z_]+|up)\b", expr))
        assert used, f"{rule['alert']}: no metric in {expr!r}"
        unknown = used - names - PROMETHEUS_OWN
        assert not unknown, f"{rule['alert']} names {unknown}, which ctld does not export"


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation dropped, spaces to -."""
    found = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_every_alert_has_a_severity_and_a_runbook_that_exists() -> None:
    heads = anchors(RUNBOOKS.read_text())
    seen = set()
    for rule in alerts():
        name = rule["alert"]
        assert name not in seen, f"{name} twice"
        seen.add(name)
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        assert rule["annotations"]["summary"], name
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == "docs/operations.md", f"{name}: {url}"
        assert anchor in heads, f"{name}: docs/operations.md has no heading #{anchor}"
