"""The web page reads jobs through the API's own selection (ControllerApi.visible_jobs,
GetJobs's: the same authorization as squeue) and shows them through policy.shown (the
same masks), never by walking ctld's job records itself (issue 37)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "ctld"


def _web_modules() -> list[Path]:
    found = sorted(p for p in SRC.rglob("*.py") if "web" in p.relative_to(SRC).parts[:-1])
    assert found, "ctld's web package was not found"
    return found


def test_no_web_view_walks_or_fetches_ctlds_job_records() -> None:
    offenders = []
    for path in _web_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            # X.jobs.get(...), X.jobs.values(), X.jobs.items(), X.jobs[...]
            target = (
                node.func.value
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "values", "items")
                else None
            )
            if isinstance(node, ast.Subscript):
                target = node.value
            if isinstance(target, ast.Attribute) and target.attr == "jobs":
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not offenders, f"web views reading ctld's jobs directly: {offenders}"
