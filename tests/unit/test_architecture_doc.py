"""docs/architecture.md names real files: every path in backticks exists, every module a
"one job per module" table names is a module of its program, and a `path: name` or
`path::test` names something defined there. A module moved or renamed without the page
fails here by name (issue 37: the page had drifted from the code)."""

from __future__ import annotations

import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src"
# not walked: caches, venvs, git's own files (a venv holds tens of thousands of files)
SKIP = {".git", ".venv", ".mypy_cache", ".ruff_cache", ".hypothesis", "__pycache__", "node_modules"}

# Paths in backticks that are not files of this repository, each with why.
NOT_IN_REPO: dict[str, str] = {
    "../shared/design/ARCHITECTURE.md": "the starting brief, outside the repository",
    "tls.dir/ca.crt": "a file in the directory the config's tls.dir names",
}

# A module table's header (its first row) -> the folder its first column's modules are in.
TABLES: dict[str, pathlib.Path] = {
    "| module | its job | writes? |": SRC / "ctld",
    "| module | job |": SRC / "noded",
    "| part | its job | changes |": SRC / "ctld" / "sched",
    "| layer | folders | what they hold |": SRC / "ctld",
}

_TICKED = re.compile(r"`([^`]+)`")
_EXTENSIONS = (".py", ".md", ".js", ".toml", ".proto", ".txt", ".yaml", ".yml", ".json")


def _files() -> list[str]:
    """Every file of the repository, relative to its root, but those under SKIP."""
    found = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in SKIP]
        rel = pathlib.Path(folder).relative_to(ROOT)
        found += [(rel / n).as_posix() for n in names]
    return found


FILES = _files()


def _ticked(text: str) -> list[tuple[int, str]]:
    return [
        (n, m.group(1))
        for n, line in enumerate(text.splitlines(), 1)
        for m in _TICKED.finditer(line)
    ]


def _is_path(token: str) -> bool:
    """A repository path: a name with a folder or a file extension, no spaces, no
    placeholders (``<spool>/hold``), no absolute system path (``/proc/...``), no URL."""
    if " " in token or "<" in token or token.startswith("/") or "://" in token:
        return False
    return "/" in token or token.endswith(_EXTENSIONS)


def _exists(path: str) -> bool:
    """``path`` is a file or folder of the repository, named from the root or by its
    last components (the page names ``ctld/ops/endings.py``, ``core/machine.py`` in
    noded's section, ``endings.py`` in a table)."""
    tail = path.rstrip("/")
    return any(
        f == tail or f.startswith(tail + "/") or f.endswith("/" + tail) or f"/{tail}/" in f
        for f in FILES
    )


def _defines(path: str, name: str) -> bool:
    """A file ending in ``path`` defines ``name`` (a function, class or assignment)."""
    tail = path.rstrip("/")
    pattern = re.compile(
        rf"^\s*(?:async def|def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\b\s*[:=]", re.M
    )
    return any(
        pattern.search((ROOT / f).read_text(errors="replace"))
        for f in FILES
        if f == tail or f.endswith("/" + tail)
    )


def missing_paths(text: str) -> list[str]:
    """The backticked paths of ``text`` that name nothing in the repository, and the
    ``path: name`` / ``path::name`` whose file defines no such name."""
    found = []
    for line, token in _ticked(text):
        path, sep, name = token.partition("::") if "::" in token else token.partition(": ")
        if not _is_path(path) or path in NOT_IN_REPO:
            continue
        if not _exists(path):
            found.append(f"line {line}: `{token}` names no file")
        elif sep and re.fullmatch(r"\w+", name.strip()) and not _defines(path, name.strip()):
            found.append(f"line {line}: `{token}`: {path} defines no {name.strip()}")
    return found


def _tables(text: str) -> list[tuple[str, list[tuple[int, str]]]]:
    """Each markdown table: its header row and its body rows (line number, row)."""
    tables: list[tuple[str, list[tuple[int, str]]]] = []
    in_table = False
    for n, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            in_table = False
        elif not in_table:
            tables.append((line.strip(), []))
            in_table = True
        elif not line.startswith("|---"):
            tables[-1][1].append((n, line))
    return tables


def missing_modules(text: str) -> list[str]:
    """The modules (``x.py``, ``x``, ``x/``) a module table's first column names that are
    not in the table's folder or below it."""
    found = []
    for header, rows in _tables(text):
        folder = TABLES.get(header)
        if folder is None:
            continue
        for line, row in rows:
            for name in _TICKED.findall(row.split("|")[1]):
                stem = name.rstrip("/").removesuffix(".py")
                if not re.fullmatch(r"[a-z_]\w*", stem):  # a class (`Placer`), not a module
                    continue
                if not any(folder.rglob(f"{stem}.py")) and not any(
                    p.is_dir() for p in folder.rglob(stem)
                ):
                    where = folder.relative_to(ROOT)
                    found.append(f"line {line}: `{name}` is no module under {where}")
    return found


def test_every_path_the_page_names_exists() -> None:
    assert missing_paths(DOC.read_text()) == []


def test_every_module_of_the_module_tables_exists() -> None:
    text = DOC.read_text()
    headers = {header for header, _ in _tables(text)}
    assert set(TABLES) <= headers, "a module table's header changed: update TABLES"
    assert missing_modules(text) == []


def test_each_path_not_in_the_repository_is_still_named() -> None:
    text = DOC.read_text()
    assert all(f"`{path}`" in text for path in NOT_IN_REPO)


@pytest.mark.parametrize(
    "planted",
    [
        "`ctld/jobs/endings.py`",  # a module in another folder
        "`corral/jobenvs.py`",  # a misspelt module
        "`tests/unit/test_no_such_thing.py`",  # a test that is gone
        "`ctld/storage/migrations/old/`",  # a folder that is gone
        "`ctld/api/rpc.py: no_such_handler`",  # a function the file does not define
        "`tests/unit/test_backfill.py::test_gone`",  # a test function that is gone
    ],
)
def test_the_checker_sees_a_wrong_path(planted: str) -> None:
    assert missing_paths(f"a claim about {planted}, here\n")


def test_the_checker_lets_real_paths_be() -> None:
    text = (
        "`ctld/ops/endings.py`, `corral/jobenv.py`, `tests/unit/test_ctld_layers.py`, "
        "`endings.py`, `client/views/`, `ctld/api/grpc_service.py: service_handler`, "
        "`<spool>/hold`, `/proc/self/fd`, `corral why NODE`\n"
    )
    assert missing_paths(text) == []


def test_the_checker_sees_a_wrong_module_in_a_table() -> None:
    table = (
        "| module | its job | writes? |\n|---|---|---|\n"
        "| `endings.py` | ends jobs | yes |\n| `enders.py` | planted | no |\n"
        "| module | job |\n|---|---|\n| `spawn` | real |\n| `spawner` | planted |\n"
    )
    found = missing_modules(table.replace("| module | job |", "\n| module | job |"))
    assert [f.split("`")[1] for f in found] == ["enders.py", "spawner"]
