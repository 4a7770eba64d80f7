"""One of each: Slurm's --signal, --array and --dependency syntax has one parser
(corral/jobsyntax.py), called at submit (sbatch for early errors, ctld once for the
job) and nowhere after."""

from __future__ import annotations

import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"

#: who may call each parser: jobsyntax itself, sbatch (its early errors), ctld's submit
#: (validate.py), and corral/jobspec.py for a job that came without its typed values
PARSERS = {
    "parse_warn_signal": {"corral/jobsyntax.py", "ctld/validate.py", "corral/jobspec.py"},
    "parse_array": {
        "corral/jobsyntax.py",
        "ctld/validate.py",
        "corral/jobspec.py",
        "client/jobopts.py",
    },
    "parse_dependency": {
        "corral/jobsyntax.py",
        "ctld/validate.py",
        "corral/jobspec.py",
        "client/jobopts.py",
    },
    "signal_number": {"corral/jobsyntax.py", "client/scancel.py"},
}


def _calls() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {name: set() for name in PARSERS}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("corral/wire/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name in found:
                    found[name].add(rel)
    return found


def test_each_syntax_is_parsed_only_at_submit() -> None:
    for name, callers in _calls().items():
        assert callers <= PARSERS[name], f"{name} is called in {sorted(callers - PARSERS[name])}"
