"""sinfo's and scontrol's power-saving words, as Slurm 22.05 shows them (issue 27):
idle~ / idle# / idle% / mix!, down~ with its reason in -R, -t powered_down, scontrol's
+CLOUD+POWERED_DOWN flags, State=POWER_* and `scontrol power up|down`."""

from __future__ import annotations

import pytest

from client.fmt import Reported
from client.nodepower import power_command
from client.scontrol_show import complete_state
from client.scontrol_update import update_node_request
from client.sinfo import format_sinfo, node_filter
from tests.unit.test_sinfo import NOW, PARTS, node

DOWN_OFF = "NODE_POWER_POWERED_DOWN"
NODES = [
    node("node01", "IDLE", power=DOWN_OFF, cloud=True),
    node("node02", "IDLE", power="NODE_POWER_POWERING_UP"),
    node("node03", "IDLE", power="NODE_POWER_POWERING_DOWN"),
    node("node04", "MIXED", powerDownPending=True, allocCpus=4, jobIds=["7"]),
]


def test_sinfo_power_suffixes() -> None:
    out = format_sinfo(PARTS[:1], NODES, NOW, view="node_long")
    states = {line.split()[0]: line.split()[3] for line in out.splitlines()[1:]}
    assert states == {"node01": "idle~", "node02": "idle#", "node03": "idle%", "node04": "mixed!"}
    assert "idle~ node01" in format_sinfo(PARTS[:1], NODES, NOW)


def test_a_node_that_failed_to_resume_is_down_tilde_with_its_reason() -> None:
    failed = node(
        "node01",
        "DOWN",
        power=DOWN_OFF,
        notResponding=True,
        reason="ResumeTimeout reached",
        reasonTime=NOW - 60,
    )
    assert "down~ node01" in format_sinfo(PARTS[:1], [failed], NOW)
    assert "ResumeTimeout reache " in format_sinfo(PARTS[:1], [failed], NOW, view="reasons")


def test_sinfo_t_power_names() -> None:
    keep = node_filter({"states": "powered_down,powering_up"})
    assert [n["name"] for n in NODES if keep(n)] == ["node01", "node02"]
    assert [n["name"] for n in NODES if node_filter({"states": "cloud"})(n)] == ["node01"]
    assert [n["name"] for n in NODES if node_filter({"states": "power_down"})(n)] == ["node04"]


def test_scontrol_flags() -> None:
    assert complete_state(NODES[0]) == "IDLE+CLOUD+POWERED_DOWN"
    assert complete_state(NODES[1]) == "IDLE+POWERING_UP"
    assert complete_state(NODES[3]) == "MIXED+POWER_DOWN"


@pytest.mark.parametrize("state", ["POWER_UP", "POWER_DOWN", "POWER_DOWN_ASAP", "power_down_force"])
def test_scontrol_update_power_states(state: str) -> None:
    request = update_node_request(["NodeName=node[01-02]", f"State={state}"])
    assert request == {"names": ["node01", "node02"], "state": state.upper()}


def test_scontrol_power_command() -> None:
    assert power_command(["up", "node[01-02]"]) == (["node01", "node02"], "POWER_UP")
    assert power_command(["down", "node03"]) == (["node03"], "POWER_DOWN")
    assert power_command(["down", "force", "node03"]) == (["node03"], "POWER_DOWN_FORCE")
    assert power_command(["down", "asap", "node03"]) == (["node03"], "POWER_DOWN_ASAP")
    for bad in (["sideways", "node03"], ["up"], ["down", "asap", "n1", "n2"]):
        with pytest.raises(Reported, match="Usage: scontrol power"):
            power_command(bad)
