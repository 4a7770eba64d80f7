"""Every change to a job, a step or a node goes through ctld/core/commit.py: this test reads
ctld's code to hold it.

A job's (or a step's) ``.state`` is set only in commit.py (and jobstate.py, the state
machine it calls); jobstate and nodestate events are applied only there; only commit.py
writes jobs (and nodes' drains and DOWNs) to the store; any other field of a job, its
spec or its steps, and a node's state (the fields nodestate.py owns), is written only
there too (``commit_rules.py`` says how a write is recognized), but for the two
writers named below. A new way around the commit step fails here, naming the line.
"""

from __future__ import annotations

import ast
import pathlib

from tests.unit import commit_rules

CTLD = pathlib.Path(__file__).resolve().parents[2] / "src" / "ctld"
ALLOWED = {"commit.py", "jobstate.py", "nodestate.py"}
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
            # (nodestate.restore: the state's load, reading drains and DOWNs back)
            loading = func.attr == "restore" and path.name == "state.py"
            nodestate = func.attr in ("transition", "restore") and owner in ("ns", "nodestate")
            if nodestate and not loading:
                found.append(f"{path.name}:{node.lineno}: calls nodestate.{func.attr}")
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
            and node.module in ("ctld.model.jobstate", "ctld.model.nodestate")
            and any(a.name in ("transition", "restore") for a in node.names)
        ):
            what = node.module.rpartition(".")[2]
            found.append(f"{path.name}:{node.lineno}: imports {what}.transition")
    return found


def test_only_the_commit_module_changes_job_state() -> None:
    problems = [v for p in _modules() for v in _violations(p)]
    assert problems == []


# a pending job's reason is written by pending.py; these two set the reasons of jobs
# that leave the queue or run (TimeLimit, IdleGPUs, "launch failed: ...")
# (nodes.py: a node's own drain reason)
REASON_WRITERS = {"pending.py", "endings.py", "job_reports.py", "nodes.py"}


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
        "from ctld.model.jobstate import transition\n"
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


# Writers of job fields beside the commit step, each for its fields alone. Both write
# what the next pass writes again (in memory: a store write per pending job per pass is
# what the commit step must not add); the job's row carries them at its next change.
WRITERS = {
    # the applier's reasons and forecasts of pending jobs (plan.reasons, plan.forecasts)
    "pending.py": {"reason", "expected_start", "forecast_nodes", "forecast_reserved", "waits_for"},
    # the priority recalculation (fair-share and age move with time)
    "priorities.py": {"priority", "priority_factors"},
}
# Functions that change copies of jobs, never ctld's own: (module, function) -> why
COPIES = {
    ("authz.py", "scrub_job"): "scrubs the copy Policy.shown makes for a reader",
    ("rpc.py", "query_accounting"): "sacct's rows: the store's copies, trimmed for the reply",
    ("rpc.py", "explain_job"): "the reply's blockers, trimmed for the caller",
}


def _field_writes() -> list[str]:
    found = []
    for path in _modules():
        rel = path.name
        for w in commit_rules.writes(path, rel):
            if w.field in WRITERS.get(rel, ()) or (rel, w.function) in COPIES:
                continue
            found.append(str(w))
    return found


def test_no_job_step_or_node_field_is_written_outside_the_commit_step() -> None:
    assert _field_writes() == []


def _planted(tmp_path: pathlib.Path, code: str) -> list[str]:
    bad = tmp_path / "planted.py"
    bad.write_text(code)
    return sorted(f"{w.kind} .{w.field}" for w in commit_rules.writes(bad))


def test_the_field_checker_catches_each_kind_of_write(tmp_path: pathlib.Path) -> None:
    found = _planted(
        tmp_path,
        "def f(st, job: pb.Job, step: pb.Step, node: NodeRecord, i):\n"
        "    job.end_time = 3\n"  # a scalar
        "    job.spec.time_limit_s += 60\n"  # through .spec
        "    job.waits_for[:] = [1]\n"  # a repeated field's contents
        "    del job.allocations[:]\n"
        "    job.usage.CopyFrom(x)\n"  # a message field
        "    job.failed_nodes.append('n1')\n"
        "    job.ClearField('held_end')\n"
        "    setattr(job, 'hold', 1)\n"
        "    step.exit_code = 1\n"
        "    node.drain = True\n"  # a node's flag
        "    st.nodes['n1'].reason = 'x'\n"
        "    st.jobs.get(i).priority = 5\n"
        "    for j in st.jobs.values():\n"
        "        j.nodelist = ''\n"
        "    other = st.job(i)\n"
        "    other.steps[0].end_time = 1\n"
        "    someone.cancelled_by_uid = 0\n",  # unknown: named like a job's field
    )
    assert found == sorted(
        [
            "job .end_time",
            "job .spec",
            "job .waits_for",
            "job .allocations",
            "job .usage",
            "job .failed_nodes",
            "job .held_end",
            "job .hold",
            "step .exit_code",
            "node .drain",
            "node .reason",
            "job .priority",
            "job .nodelist",
            "job .steps",
            "job .cancelled_by_uid",
        ]
    )


def test_the_field_checker_lets_new_messages_and_ctld_s_own_parts_be(
    tmp_path: pathlib.Path,
) -> None:
    found = _planted(
        tmp_path,
        "class Scheduler:\n"
        "    def f(self, job: pb.Job, spec: pb.JobSpec, node: NodeRecord):\n"
        "        self.state.version += 1\n"  # ctld's own part
        "        bare = pb.Job()\n"  # a new message: building it changes nothing
        "        bare.CopyFrom(job)\n"
        "        del bare.events[:]\n"
        "        out = pb.ListJobsResponse()\n"
        "        item = out.jobs.add()\n"
        "        item.reason = 'x'\n"
        "        spec.account = 'a'\n"  # a request, not yet a job's spec
        "        node.alloc_cpus += 4\n"  # a node's allocations: bookkeeping
        "        node.last_heartbeat = 1.0\n"
        "        wire = node.to_wire()\n"
        "        wire.reservation = 'r'\n",
    )
    assert found == []


def test_the_field_rules_see_the_commit_step_itself(tmp_path: pathlib.Path) -> None:
    """The checker is no blind spot: run on commit.py and nodestate.py (which may write),
    it finds their writes, so an empty answer elsewhere means none."""
    assert commit_rules.writes(CTLD / "core" / "commit.py")
    assert {w.field for w in commit_rules.writes(CTLD / "model" / "nodestate.py")} >= {"reason"}


def test_a_change_is_persisted_only_by_the_commit_step() -> None:
    """The one-hop answer (docs/architecture.md): a job's, a step's and a node's change
    is persisted in commit.py alone: the only maker of job rows and node drain/DOWN rows."""
    makers = {"insert_job", "update_job"}
    node_rows = {"drains_put", "drains_delete", "downs_put", "downs_delete"}
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
            name = node.func.id if isinstance(node.func, ast.Name) else name
            if name in makers or (name == "Op" and node_rows & {k.arg for k in node.keywords}):
                found.append(f"{path.name}:{node.lineno}: {name}")
    assert found == []
    doc = (CTLD.parents[1] / "docs" / "architecture.md").read_text()
    answer = doc.split("**Where is a job's, step's or node's change persisted?**", 1)[1]
    assert answer.split("\n\n", 1)[0].count("commit.py") >= 1
