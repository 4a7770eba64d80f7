"""A reconfigure's plan, pure: what changed by key (corral/config/diff.py), each key's
class per daemon (keyclasses.py), and the config kept (reload.py): restart-only keys at
their running values. docs/config.md's table is checked against the code's."""

from __future__ import annotations

import copy
import pathlib
import re
from typing import Any

import pytest

from corral.config import parse_config
from corral.config.diff import ADDED, REMOVED, REORDERED, diff, patterns
from corral.config.keyclasses import CTLD, LIVE, NODED, RESTART, UNUSED, class_of, classify
from corral.config.reload import plan

BASE: dict[str, Any] = {
    "controller": {"grpc_port": 7000, "state_dir": "/tmp/x", "purge_job_after": 3600},
    "noded": {"prolog": "/bin/true"},
    "nodes": [{"names": "n[1-3]", "cpus": 8, "gpus": {"count": 2}}],
    "partitions": [
        {"name": "gpu", "nodes": "n[1-3]", "default": True, "max_time": "1:00:00"},
        {"name": "cpu", "nodes": "n1"},
    ],
    "qos": [{"name": "high", "priority": 10}],
    "mail": {"program": "/bin/true"},
}


def config(**changes: Any) -> Any:
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            data.setdefault(section, {})[name] = value
        else:
            data[section] = value
    return parse_config(data, "/etc/corral/corral.toml")


def keys(old: Any, new: Any) -> list[str]:
    return [str(c) for c in diff(old, new)]


def test_nothing_changed_is_no_change() -> None:
    assert diff(config(), config()) == []


def test_keys_are_named_as_the_file_names_them() -> None:
    new = config(controller__purge_job_after=60, mail__program="/bin/echo")
    new_from = config(mail={"program": "/bin/true", "from": "hpc@example.org"})
    assert keys(config(), new) == ["controller.purge_job_after", "mail.program"]
    assert keys(config(), new_from) == ["mail.from"]  # the field is ``sender``


def test_named_entries_are_matched_by_name_and_field_by_field() -> None:
    parts = copy.deepcopy(BASE["partitions"])
    parts[0]["max_time"] = "0:10:00"
    parts.append({"name": "extra", "nodes": "n2"})
    del parts[1]
    changes = diff(config(), config(partitions=parts))
    assert [str(c) for c in changes] == [
        "partitions.cpu (removed)",
        "partitions.gpu.max_time",
        "partitions.extra (added)",
    ]
    assert [c.pattern for c in changes] == ["partitions.*", "partitions.*.max_time", "partitions.*"]
    assert [c.kind for c in changes] == [REMOVED, "changed", ADDED]


def test_partitions_reordered_is_a_change_the_default_may_hang_on() -> None:
    parts = list(reversed(copy.deepcopy(BASE["partitions"])))
    (change,) = diff(config(), config(partitions=parts))
    assert change.kind == REORDERED and change.pattern == "partitions"


def test_nodes_compare_node_by_node_whatever_the_hostlist() -> None:
    split = [
        {"names": "n1", "cpus": 8, "gpus": {"count": 2}},
        {"names": "n[2-3]", "cpus": 8, "gpus": {"count": 2}},
    ]
    assert diff(config(), config(nodes=split)) == []
    grown = [{"names": "n[1-4]", "cpus": 8, "gpus": {"count": 2}}]
    assert keys(config(), config(nodes=grown)) == ["nodes.n4 (added)"]
    bigger = [*split[:1], {"names": "n[2-3]", "cpus": 16, "gpus": {"count": 4}}]
    assert keys(config(), config(nodes=bigger)) == [
        "nodes.n2.cpus",
        "nodes.n2.gpus.count",
        "nodes.n3.cpus",
        "nodes.n3.gpus.count",
    ]


def test_every_key_a_diff_can_name_has_a_class_for_each_daemon() -> None:
    for pattern in patterns():
        classes = (class_of(pattern, CTLD), class_of(pattern, NODED))
        assert set(classes) <= {LIVE, RESTART, UNUSED}, pattern
        assert classes != (UNUSED, UNUSED), f"{pattern}: read by no daemon?"


@pytest.mark.parametrize(
    ("pattern", "ctld", "noded"),
    [
        ("controller.grpc_port", RESTART, UNUSED),
        ("controller.store_url", RESTART, UNUSED),
        ("controller.log_level", LIVE, UNUSED),
        ("noded.log_level", UNUSED, LIVE),
        ("noded.port", UNUSED, RESTART),
        ("heartbeat.timeout_s", LIVE, RESTART),  # noded's fence guard has its deadline
        ("tls.dir", RESTART, RESTART),
        ("partitions.*", LIVE, UNUSED),
        ("partitions.*.max_time", LIVE, UNUSED),
        ("nodes.*", LIVE, LIVE),
        ("nodes.*.gpus.count", RESTART, RESTART),
        ("nodes.*.suspend_time", LIVE, UNUSED),
        ("priority.weight_age", LIVE, UNUSED),
        ("qos.*.priority", LIVE, UNUSED),
        ("mail.program", LIVE, UNUSED),
        ("power.suspend_time", LIVE, UNUSED),
        ("scheduler.start_on_submit", RESTART, UNUSED),
    ],
)
def test_classes(pattern: str, ctld: str, noded: str) -> None:
    assert (class_of(pattern, CTLD), class_of(pattern, NODED)) == (ctld, noded)


def test_classify_splits_live_from_restart_and_leaves_out_what_a_daemon_does_not_read() -> None:
    new = config(controller__grpc_port=7001, noded__prolog="/bin/false", mail__program="")
    live, restart = classify(diff(config(), new), CTLD)
    assert [str(c) for c in live] == ["mail.program"]
    assert [str(c) for c in restart] == ["controller.grpc_port"]
    live, restart = classify(diff(config(), new), NODED)
    assert [str(c) for c in live] == ["noded.prolog"] and restart == []


def test_the_plan_keeps_restart_only_keys_at_their_running_values() -> None:
    running = config()
    new = config(
        controller__grpc_port=7001,
        controller__kill_wait_s=5.0,
        nodes=[{"names": "n[1-3]", "cpus": 16, "gpus": {"count": 2}, "suspend_time": 60}],
    )
    reload = plan(running, new, CTLD)
    assert [str(c) for c in reload.restart] == ["controller.grpc_port", *(
        f"nodes.n{i}.cpus" for i in (1, 2, 3)
    )]  # fmt: skip
    kept = reload.config
    assert kept.controller.grpc_port == 7000 and kept.controller.kill_wait_s == 5.0
    assert {n: kept.node(n).cpus for n in kept.node_names} == {"n1": 8, "n2": 8, "n3": 8}
    assert {kept.node(n).suspend_time_s for n in kept.node_names} == {60}  # live: taken
    again = plan(kept, new, CTLD)  # reported again until a restart, and only those
    assert [str(c) for c in again.restart] == [str(c) for c in reload.restart]
    assert again.live == ()


def test_a_noded_reads_only_its_own_node() -> None:
    new = config(nodes=[{"names": "n[1-3]", "cpus": 16, "gpus": {"count": 2}}])
    reload = plan(config(), new, NODED, lambda c: c.section != "nodes" or c.item == "n2")
    assert [str(c) for c in reload.restart] == ["nodes.n2.cpus"]
    assert reload.config.node("n2").cpus == 8 and reload.config.node("n1").cpus == 16


DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "config.md"


def _documented() -> dict[tuple[str, str], str]:
    """docs/config.md's reconfigure table: (pattern, daemon or "") -> class."""
    text = DOC.read_text().split("## What a reconfigure applies", 1)[1].split("\n## ", 1)[0]
    out: dict[tuple[str, str], str] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        section = cells[0].strip("`[]")
        for kind, cell in ((LIVE, cells[1]), (RESTART, cells[2])):
            for word in filter(None, (w.strip() for w in cell.split(","))):
                m = re.fullmatch(r"`([^`]+)`(?: \((ctld|noded)\))?", word)
                assert m, f"docs/config.md: {word!r} in the row of {section}"
                key = m[1]
                if key in ("added or removed", "added, removed or reordered"):
                    pattern = f"{section}.*"
                elif key == "reordered":
                    pattern = section
                elif section in ("nodes", "partitions", "qos", "accounts"):
                    pattern = f"{section}.*.{key}"
                else:
                    pattern = f"{section}.{key}" if section != "top level" else key
                out[(pattern, m[2] or "")] = kind
    return out


def test_docs_config_md_names_each_keys_class_as_the_code_does() -> None:
    documented = _documented()
    for pattern in patterns():
        for daemon in (CTLD, NODED):
            actual = class_of(pattern, daemon)
            said = documented.get((pattern, daemon), documented.get((pattern, "")))
            if actual == UNUSED:
                assert documented.get((pattern, daemon)) is None, (pattern, daemon)
            else:
                assert said == actual, f"docs/config.md: {pattern} for {daemon}: {said}"
