import json
import subprocess
import sys

CODE = """
import structlog
from corral.log import setup_logging
setup_logging("ctld", json={json})
structlog.get_logger().info("job submitted", job_id=7, node="node01")
"""


def run(as_json: bool) -> str:
    out = subprocess.run(
        [sys.executable, "-c", CODE.format(json=as_json)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stderr.strip()


def test_key_value_lines_carry_ids() -> None:
    line = run(False)
    assert 'event="job submitted"' in line
    assert "job_id=7" in line and "node=node01" in line and "component=ctld" in line


def test_json_lines_under_the_flag() -> None:
    record = json.loads(run(True))
    assert record["event"] == "job submitted" and record["job_id"] == 7
    assert record["level"] == "info" and record["component"] == "ctld"
