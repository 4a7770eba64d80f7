"""Each rule that used to live in two or three places has one home, and the old places
import it (issue 37, "one home for each rule"): read from the code, so a copy grown back
in an old place, which would not need the import, fails here."""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"

# (the old place, the home, a name it takes from there)
ONE_HOME = [
    # the Slurm job environment: salloc's shell; noded's batch script and tasks
    ("client/alloc.py", "corral.jobenv", None),
    ("noded/env.py", "corral.jobenv", None),
    # container mounts, parsed once: the client checks with the same grammar, ctld parses
    # at submit into ContainerSpec.parsed_mounts, noded mounts those (and parses only a
    # 1.0 ctld's strings, with the same parser)
    ("client/containeropts.py", "corral.containerspec", None),
    ("ctld/model/validate.py", "corral.containerspec", None),
    ("noded/containers/mounts.py", "corral.containerspec", "parse_mount"),
    # efficiency inputs: seff and the web page's job view
    ("client/seff.py", "corral.efficiency", "job_efficiency"),
    ("ctld/web/job_view.py", "corral.efficiency", "job_efficiency"),
    # day bounds: sreport's and sacct's days, the web's usage view
    ("client/report.py", "corral.slurmfmt", "day_bounds"),
    ("ctld/web/usage_view.py", "corral.slurmfmt", "day_bounds"),
    ("client/sreport.py", "corral.slurmfmt", "local_midnight"),
    ("client/sacct.py", "corral.slurmfmt", "local_midnight"),
] + [
    # the commands' reply views: generated from the proto's descriptors
    (f"client/views/{p.name}", "corral.wire.views", None)
    for p in sorted((SRC / "client" / "views").glob("*.py"))
    if p.name != "__init__.py"
]


def imports(path: pathlib.Path) -> dict[str, set[str]]:
    """The modules ``path`` imports (function-level ones too), each with the names taken."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = {a.name for a in node.names}
            found.setdefault(node.module, set()).update(names)
            for name in names:  # from corral import containerspec
                found.setdefault(f"{node.module}.{name}", set())
        elif isinstance(node, ast.Import):
            for a in node.names:
                found.setdefault(a.name, set())
    return found


@pytest.mark.parametrize(("place", "home", "name"), ONE_HOME)
def test_the_old_place_imports_the_rules_one_home(place: str, home: str, name: str | None) -> None:
    got = imports(SRC / place)
    assert home in got, f"{place} does not import {home}"
    if name is not None:
        assert name in got[home], f"{place} does not take {name} from {home}"


def test_every_view_module_is_checked() -> None:
    assert sum(1 for p, _, _ in ONE_HOME if p.startswith("client/views/")) >= 6
