"""[power] and the per-partition and per-node-set suspend_time (issue 27)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.config import parse_config
from corral.config.power import NEVER
from corral.errors import ConfigError


def _config(power: dict[str, Any], **node: Any) -> dict[str, Any]:
    return {
        "nodes": [{"names": "n[1-4]", "cpus": 2, "memory_mb": 1000, **node}],
        "partitions": [{"name": "batch", "nodes": "n[1-4]"}],
        "power": power,
    }


def test_defaults_are_slurms() -> None:
    cfg = parse_config(_config({})).power
    assert cfg.suspend_time_s == NEVER and not cfg.enabled
    assert (cfg.suspend_timeout_s, cfg.resume_timeout_s) == (30, 60)
    assert (cfg.resume_rate, cfg.suspend_rate) == (300, 60)


def test_every_key() -> None:
    cfg = parse_config(
        _config(
            {
                "suspend_program": "/sbin/suspend",
                "resume_program": "/sbin/resume",
                "resume_fail_program": "/sbin/failed",
                "suspend_time": "10:00",
                "suspend_timeout": 45,
                "resume_timeout": "5:00",
                "resume_rate": 10,
                "suspend_rate": 0,
                "suspend_exc_nodes": "n[1-2]",
                "suspend_exc_parts": ["batch"],
                "idle_on_node_suspend": True,
                "program_user": "corral",
                "idle_watts": 350,
                "powered_down_watts": 10,
            }
        )
    ).power
    assert cfg.enabled and cfg.suspend_time_s == 600 and cfg.resume_timeout_s == 300
    assert cfg.suspend_exc_nodes == ("n1", "n2") and cfg.suspend_exc_parts == ("batch",)
    assert cfg.idle_on_node_suspend and cfg.program_user == "corral" and cfg.idle_watts == 350


def test_suspend_time_levels() -> None:
    data = _config({"resume_program": "/r", "suspend_time": 60}, suspend_time="INFINITE")
    data["partitions"][0]["suspend_time"] = 120
    cfg = parse_config(data)
    assert cfg.nodes[0].suspend_time_s == NEVER
    assert cfg.partitions[0].suspend_time_s == 120
    assert parse_config(_config({})).nodes[0].suspend_time_s is None


def test_cloud_nodes_need_a_resume_program() -> None:
    with pytest.raises(ConfigError, match=r"needs \[power\].resume_program"):
        parse_config(_config({}, state="cloud"))
    assert parse_config(_config({"resume_program": "/r"}, state="cloud")).nodes[0].cloud


@pytest.mark.parametrize(
    ("power", "match"),
    [
        ({"resume_program": "relative/path"}, "must be an absolute path"),
        ({"suspend_program": "/s"}, "needs a resume_program"),
        ({"resume_program": "/r", "suspend_exc_nodes": "x1"}, "'x1' is not a node"),
        ({"resume_program": "/r", "suspend_exc_parts": "gpu"}, "'gpu' is not a partition"),
        ({"resume_rate": -1}, "must be >= 0"),
        ({"suspend_timeot": 3}, "unknown key"),
        ({"resume_timeout": 0}, "must be > 0"),
    ],
)
def test_bad_keys_are_named(power: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_config(_config(power))


def test_node_state_other_than_cloud_refused() -> None:
    with pytest.raises(ConfigError, match=r"nodes\[0\].state"):
        parse_config(_config({}, state="future"))
