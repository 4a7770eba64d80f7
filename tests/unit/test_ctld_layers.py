"""ctld's folders are its layers: a package imports its own modules and the packages of
the layers below it, never a peer of its own layer and never one above
(docs/architecture.md, "ctld's folders"). The imports are read from the code, type-only
and function-level imports included."""

from __future__ import annotations

import ast
import pathlib

import pytest

CTLD = pathlib.Path(__file__).resolve().parents[2] / "src" / "ctld"

# ctld's layers, top first. "" is the package's root: ``python -m ctld`` and
# ``python -m ctld.db``, the two entry points, and nothing else.
LAYERS: list[set[str]] = [
    {"", "sim"},  # programs: the daemon's and the store tool's entry points; the simulator
    {"daemon"},  # the process: server, preflight, socket directory, channels to nodes
    {"web", "telemetry"},  # the HTTP pages: the web UI, /metrics
    {"api"},  # transports and handlers
    {"control"},  # the Cluster, wired from the operations below; reconfigure
    # the handlers, one flat layer: each subsystem handles its requests and events by
    # calling the operations below, never another subsystem
    {"mailing", "accounts", "planning", "powersave", "fleet", "jobs"},
    {"ops"},  # the operations: end, cancel, requeue, drain, DOWN, resume, verdicts
    {"core"},  # State and the commit step
    {"model"},  # records, tables, rules and state machines, without State
    {"storage"},  # the durable store
    {"codec", "sched"},  # proto's JSON mapping and masks; the pure scheduling core
]

# Imports that go up or sideways today, each with why. Every one must still be in the
# code (an exception that is gone is removed here), and no other may appear.
KNOWN: dict[tuple[str, str], str] = {
    # the Cluster makes the ledger that observes every commit from ctld's start on; the
    # scrape (telemetry/metrics.py) reads it off the Cluster
    ("control/cluster.py", "telemetry.metrics_ledger"): "the ledger is wired as an observer",
}


# The modules of the handlers' layer that handle nothing themselves: their package's
# handlers use them. Every other module there is a handler, and no handler imports
# another (nor does a helper import a handler): handlers call the operations (ctld/ops).
HELPERS: set[str] = {
    "jobs/steps.py",  # where a step's tasks go (pure)
    "fleet/liveness.py",  # whether ctld may judge silent nodes now
    "fleet/loopwatch.py",  # ctld's own stalls
    "planning/snapshot.py",  # the scheduler's input
    "planning/node_views.py",  # the snapshot's nodes
    "planning/starts.py",  # the fields a start sets
    "planning/preemption.py",  # carrying out the plan's preemptions
    "planning/explain.py",  # corral why, against the snapshot
    "powersave/power_programs.py",  # running the suspend and resume programs
    "accounts/sacctmgr_list.py",  # sacctmgr's lists
    "accounts/sacctmgr_words.py",  # sacctmgr's words
    "mailing/mail.py",  # sending the mail
}
HANDLER_LAYER = next(layer for layer in LAYERS if "jobs" in layer)


def handlers() -> set[str]:
    """The handler modules: the handler layer's modules, less helpers and packages' inits."""
    return {
        str(p.relative_to(CTLD))
        for pkg in HANDLER_LAYER
        for p in (CTLD / pkg).glob("*.py")
        if p.name != "__init__.py"
    } - HELPERS


def handler_breaches(rel: str, source: str) -> list[str]:
    """The handler modules that the module at ``rel`` imports, if it is in the handlers'
    layer (a handler or a helper)."""
    if rel.split("/")[0] not in HANDLER_LAYER:
        return []
    named = {n.replace(".", "/") + ".py" for n in imported(source)}
    return [f"{rel} imports the handler {h}" for h in sorted(named & handlers() - {rel})]


def _rank() -> dict[str, int]:
    return {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def package_of(path: pathlib.Path) -> str:
    """The folder of ctld a file is in ("" for ctld's own root)."""
    parts = path.relative_to(CTLD).parts
    return parts[0] if len(parts) > 1 else ""


def imported(source: str) -> set[str]:
    """ctld's modules and packages ``source`` imports, without the leading ``ctld.``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # from ctld.x import y: y may be a module of x
            found |= {f"{node.module}.{a.name}" for a in node.names}
    names = {n.removeprefix("ctld.") for n in found if n.startswith("ctld.")}
    return {n for n in names if (CTLD / n.replace(".", "/")).exists() or _is_module(n)}


def _is_module(name: str) -> bool:
    return (CTLD / (name.replace(".", "/") + ".py")).is_file()


def breaches(rel: str, source: str) -> list[str]:
    """The imports of the file at ``rel`` (under src/ctld) that break the rule."""
    rank = _rank()
    mine = rel.split("/")[0] if "/" in rel else ""
    found = []
    for name in sorted(imported(source)):
        theirs = name.split(".")[0] if "." in name or (CTLD / name).is_dir() else ""
        below = rank[theirs] > rank[mine]
        if theirs != mine and not below and (rel, name) not in KNOWN:
            found.append(f"{rel} imports ctld.{name} ({theirs or 'the root'} is not below)")
    return found


def violations() -> list[str]:
    return [
        b
        for path in sorted(CTLD.rglob("*.py"))
        for b in breaches(str(path.relative_to(CTLD)), path.read_text())
    ]


def test_every_folder_of_ctld_has_a_layer() -> None:
    folders = {p.name for p in CTLD.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(_rank()) - {""}
    assert {package_of(p) for p in CTLD.glob("*.py")} == {""}
    assert {p.stem for p in CTLD.glob("*.py")} == {"__init__", "__main__", "db"}


def test_no_package_imports_a_peer_or_one_above() -> None:
    assert violations() == []


def test_no_handler_imports_another_handler() -> None:
    found = [
        b
        for pkg in HANDLER_LAYER
        for path in sorted((CTLD / pkg).glob("*.py"))
        for b in handler_breaches(str(path.relative_to(CTLD)), path.read_text())
    ]
    assert found == []


def test_every_helper_is_a_module_of_the_handlers_layer() -> None:
    assert all((CTLD / h).is_file() and h.split("/")[0] in HANDLER_LAYER for h in HELPERS)


def test_the_checker_sees_a_handler_importing_a_handler() -> None:
    assert handler_breaches("fleet/monitor.py", "from ctld.jobs.step_ops import StepOps\n")
    assert handler_breaches("jobs/suspects.py", "from ctld.jobs.intake import failure\n")
    assert handler_breaches("planning/snapshot.py", "from ctld.planning import scheduling\n")
    ok = "from ctld.ops.endings import Endings\nfrom ctld.planning.snapshot import Snap\n"
    assert handler_breaches("planning/queries.py", ok) == []


def test_each_known_exception_is_still_in_the_code() -> None:
    for rel, name in KNOWN:
        still = name in imported((CTLD / rel).read_text())
        assert still, f"{rel} no longer imports ctld.{name}: drop the exception"


@pytest.mark.parametrize(
    ("where", "code"),
    [
        ("core/planted.py", "from ctld.ops.endings import Endings\n"),  # one above
        ("jobs/planted.py", "from ctld.fleet import node_reports\n"),  # from ctld.X import mod
        ("storage/planted.py", "def f():\n    import ctld.model.nodes\n"),  # in a function
        ("web/planted.py", "from ctld.telemetry.metrics import Metrics\n"),  # a peer
        ("model/planted.py", "from ctld.daemon.server import Server\n"),
    ],
)
def test_the_checker_sees_an_import_up_or_sideways(where: str, code: str) -> None:
    assert breaches(where, code)


def test_the_checker_lets_an_import_down_be() -> None:
    code = "from ctld.core.commit import Change\nfrom ctld.sched import Plan\n"
    assert breaches("jobs/planted.py", code) == []
    assert breaches("jobs/planted.py", "from ctld.ops.endings import Endings\n") == []
