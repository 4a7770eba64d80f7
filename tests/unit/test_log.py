import json
import subprocess
import sys

import pytest

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


LEVELS = """
import structlog
from corral.log import set_level, setup_logging
setup_logging("ctld", level="verbose")  # Slurm's word: info
log = structlog.get_logger("ctld")
log.info("a")  # cached on its first use: the level must still move after it
set_level("warning")
log.info("b")
log.warning("c")
set_level("info")
log.info("d")
log.debug("e")
"""


def test_the_level_changes_while_the_daemon_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-c", LEVELS], capture_output=True, text=True, check=True, timeout=60
    ).stderr
    events = [line.split("event=")[1].split()[0] for line in out.splitlines()]
    assert events == ["a", "c", "d"]


def test_a_level_word_that_is_none_is_refused() -> None:
    from corral.config import parse_config
    from corral.errors import ConfigError

    assert parse_config({"controller": {"log_level": "DEBUG3"}}).controller.log_level == "debug3"
    with pytest.raises(ConfigError, match=r"noded\.log_level: 'chatty' is not a log level"):
        parse_config({"noded": {"log_level": "chatty"}})
