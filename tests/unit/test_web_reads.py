"""The web page reads through the API's read functions (ctld/api/reads.py: the
selections the RPCs answer with, so the same authorization and the same masks as the
commands), never ctld's records, state or store itself (issue 37): jobs through
``Reads.visible_jobs`` (GetJobs's, squeue's) shown through ``policy.shown``, a job's
story and earlier runs through QueryAccounting's (``corral history``'s), nodes through
GetNodes', GPU samples through ``Reads.gpus_now`` and ``Reads.gpu_series``.

What the web still reads off the cluster itself, none of it a user's data:
  policy   the authorization itself (who shares a rendering: site.py's ``_viewer``;
           the views' ``policy.shown``, ``sees_spec``, ``is_operator``)
  clock    the time a view is rendered at
  config   the heartbeat interval, beside ``web.refresh_s``: how often a view of GPU
           samples is redone (site.py's ``_generation``)
  version, passes   counters that say a view may have changed (``_generation``)
  store.check_writable   not a read: the page's cancel calls CancelJobs's handler
           itself, so it makes the refusal ``ControllerApi.call`` makes while the store
           is down
"""

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


# the declared exceptions (the module's docstring says why each stays)
ALLOWED_OFF_CLUSTER = frozenset({"policy", "clock", "config", "version", "passes"})
ALLOWED_CALLS = frozenset({("store", "check_writable")})
# ctld's records, state, store and queries: read through ctld/api/reads.py instead
FORBIDDEN_ANYWHERE = frozenset({"node_list", "gpu_samples"})


def _cluster_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each read off ctld's Cluster that is not a declared exception:
    ``X.cluster.attr`` and ``cluster.attr`` (a name bound to it), ``X.cluster`` used in any
    other way than that or as ``cluster = X.cluster``, and the names of State's parts."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[tuple[int, str]] = []

    def check_use(base: ast.expr) -> None:
        parent = parents.get(base)
        if isinstance(parent, ast.Attribute) and parent.value is base:
            grand = parents.get(parent)
            call = (
                isinstance(grand, ast.Attribute)
                and grand.value is parent
                and (parent.attr, grand.attr) in ALLOWED_CALLS
            )
            if parent.attr not in ALLOWED_OFF_CLUSTER and not call:
                found.append((parent.lineno, f"cluster.{parent.attr}"))
        elif isinstance(base, ast.Attribute) and not (
            isinstance(parent, ast.Assign)
            and all(isinstance(t, ast.Name) and t.id == "cluster" for t in parent.targets)
        ):
            found.append((base.lineno, "the cluster itself, handed on"))

    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr == "cluster") or (
            isinstance(node, ast.Name) and node.id == "cluster"
        ):
            check_use(node)
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ANYWHERE:
            found.append((node.lineno, node.attr))
    return sorted(found)


def test_no_web_view_reads_ctlds_records_state_or_store() -> None:
    """Nodes, GPU samples, a job's story and earlier runs, like jobs: through the API's
    read functions (ctld/api/reads.py), which apply the RPCs' authorization and masks."""
    offenders = [
        f"{path.relative_to(SRC)}:{line} {what}"
        for path in _web_modules()
        for line, what in _cluster_reads(ast.parse(path.read_text()))
    ]
    assert not offenders, f"web views reading ctld's cluster directly: {offenders}"


def test_the_check_sees_the_reads_it_forbids() -> None:
    """The check itself: each way of reaching ctld's records is caught, the declared
    exceptions are not."""
    caught = (
        "ctx.cluster.nodes.get(n)",
        "ctx.api.cluster.state.gpu_samples.of_job(1)",
        "ctx.cluster.store.job_story(1)",
        "1 in ctx.cluster.jobs",
        "cluster = api.cluster\ncluster.state",
        "c = ctx.api.cluster",
        "f(ctx.cluster)",
        "x.node_list([])",
    )
    for source in caught:
        assert _cluster_reads(ast.parse(source)), source
    allowed = (
        "api.cluster.policy.shown(w, j)",
        "ctx.api.cluster.clock()",
        "cluster = api.cluster\ncluster.version, cluster.passes, cluster.config.heartbeat",
        "api.cluster.store.check_writable()",
        "job.state, node.state, reply.nodes",
    )
    for source in allowed:
        assert not _cluster_reads(ast.parse(source)), source
