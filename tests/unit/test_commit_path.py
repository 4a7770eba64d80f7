"""Every job change goes through ctld/commit.py: this test reads ctld's code to hold it.

A job's (or a step's) ``.state`` is set only in commit.py (and jobstate.py, the state
machine it calls); jobstate events are applied only there; only commit.py writes jobs
to the store. A new way around the commit step fails here, naming the line.
"""

from __future__ import annotations

import ast
import pathlib

CTLD = pathlib.Path(__file__).resolve().parents[2] / "src" / "ctld"
ALLOWED = {"commit.py", "jobstate.py"}
# the scheduling simulator keeps its own plain records, never ctld's jobs
SKIP_DIRS = {"sim", "sched"}


def _modules() -> list[pathlib.Path]:
    return [
        p
        for p in sorted(CTLD.rglob("*.py"))
        if not SKIP_DIRS & set(p.relative_to(CTLD).parts[:-1]) and p.name not in ALLOWED
    ]


def _stores(targets: list[ast.expr]) -> list[ast.expr]:
    """What an assignment writes to (unpacking ``a.state, b = ...`` included)."""
    out: list[ast.expr] = []
    for t in targets:
        if isinstance(t, ast.Tuple | ast.List):
            out += _stores(list(t.elts))
        elif isinstance(t, ast.Starred):
            out += _stores([t.value])
        else:
            out.append(t)
    return out


def _literal(args: list[ast.expr]) -> object:
    """The value of a call's one literal argument (None if it is not a literal)."""
    return args[0].value if args and isinstance(args[0], ast.Constant) else None


def _violations(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for t in _stores(targets):
            # ``self.state = state`` holds ctld's State object, not a job's state
            if (
                isinstance(t, ast.Attribute)
                and t.attr == "state"
                and not (isinstance(t.value, ast.Name) and t.value.id == "self")
            ):
                found.append(f"{path.name}:{node.lineno}: assigns .state")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            owner = func.value.id if isinstance(func.value, ast.Name) else ""
            if func.attr == "transition" and owner in ("js", "jobstate"):
                found.append(f"{path.name}:{node.lineno}: calls jobstate.transition")
            store = (isinstance(func.value, ast.Attribute) and func.value.attr == "store") or (
                isinstance(func.value, ast.Name) and func.value.id == "store"
            )
            if func.attr == "commit" and store:
                found.append(f"{path.name}:{node.lineno}: commits to the store")
            if func.attr == "ClearField" and _literal(node.args[:1]) == "state":
                found.append(f"{path.name}:{node.lineno}: clears .state")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and _literal(node.args[1:2]) == "state"
        ):
            found.append(f"{path.name}:{node.lineno}: assigns .state")
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "ctld.jobstate"
            and any(a.name == "transition" for a in node.names)
        ):
            found.append(f"{path.name}:{node.lineno}: imports jobstate.transition")
    return found


def test_only_the_commit_module_changes_job_state() -> None:
    problems = [v for p in _modules() for v in _violations(p)]
    assert problems == []


# a pending job's reason is written by pending.py; these two set the reasons of jobs
# that leave the queue or run (TimeLimit, IdleGPUs, "launch failed: ...")
# (nodes.py: a node's own drain reason)
REASON_WRITERS = {"pending.py", "endings.py", "node_reports.py", "nodes.py"}


def test_only_the_applier_side_writes_reasons() -> None:
    found = []
    for path in _modules():
        if path.name in REASON_WRITERS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                found += [
                    f"{path.name}:{node.lineno}"
                    for t in _stores(list(node.targets))
                    if isinstance(t, ast.Attribute) and t.attr == "reason"
                ]
    assert found == []


def test_the_checker_sees_each_kind_of_bypass(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from ctld.jobstate import transition\n"
        "def f(job, st, step):\n"
        "    job.state = 3\n"
        "    step.state, other = 4, 5\n"
        "    counts[job.state] += 1\n"
        "    js.transition(job, 'started', cause='x', now=0)\n"
        "    await st.store.commit()\n"
    )
    found = sorted(f.split(": ", 1)[1] for f in _violations(bad))
    assert found == [
        "assigns .state",
        "assigns .state",
        "calls jobstate.transition",
        "commits to the store",
        "imports jobstate.transition",
    ]


def test_the_checker_sees_indirect_bypasses(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "indirect.py"
    bad.write_text(
        "def f(job, st):\n"
        "    setattr(job, 'state', 3)\n"
        "    job.ClearField('state')\n"
        "    store = st.store\n"
        "    store.commit()\n"
        "    setattr(job, 'priority', 3)  # not a state\n"
    )
    found = sorted(f.split(": ", 1)[1] for f in _violations(bad))
    assert found == ["assigns .state", "clears .state", "commits to the store"]
