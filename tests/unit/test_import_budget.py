"""Each command's import graph, module by module: a command that starts importing more
than it needs fails here, naming the new modules (issue 16: commands at the
interpreter's floor). Grow a budget only with a reason a user would accept for every
call of that command paying the import."""

from __future__ import annotations

import subprocess
import sys

import pytest

# What every command needs: the JSON-over-HTTP client (socket, json), the error tree,
# identity (pwd), Slurm's formats (re, math). Underscored C accelerators are not listed.
COMMON = set(
    [
        "array",
        "collections",
        "collections.abc",
        "copyreg",
        "enum",
        "errno",
        "functools",
        "itertools",
        "keyword",
        "math",
        "operator",
        "pwd",
        "re",
        "re._casefix",
        "re._compiler",
        "re._constants",
        "re._parser",
        "reprlib",
        "select",
        "selectors",
        "socket",
        "types",
        "client",
        "client.common",
        "corral",
        "corral.api",
        "corral.cjson",
        "corral.errors",
        "corral.identity",
        "corral.rest",
        "corral.wire",
        "corral.wire.controller",
    ]
)
QUERY = {"client.fmt", "client.options", "corral.slurmfmt"}
BUDGET: dict[str, set[str]] = {
    "sbatch": {"client.jobopts", "client.options", "corral.jobsyntax", "corral.slurmfmt"}
    | {"shlex", "signal"},
    "squeue": QUERY,
    "sacct": QUERY,
    "sprio": QUERY,
    "sshare": QUERY,
    "sreport": QUERY,
    "sacctmgr": {"client.options"},
    "sinfo": QUERY | {"corral.hostlist"},
    "scontrol": QUERY | {"corral.patterns"},
    "scancel": {"client.fmt", "client.options", "corral.slurmfmt", "signal"},
}
# srun and salloc allocate (sbatch's options), srun streams its tasks over a socket of
# its own (client.taskstream: selectors, struct, the built-in SHA-256 for the step
# credential's proof): no grpc, protobuf, asyncio or OpenSSL. What it imports only while
# running is checked by tests/integration/test_task_stream.py (PYTHONPROFILEIMPORTTIME).
ALLOCATING = BUDGET["sbatch"] | {"client.alloc"}
BUDGET["srun"] = ALLOCATING | {
    "client.taskstream",
    "corral.patterns",
    "corral.stepstream",
    "corral.tasks",
    "struct",
}
# salloc runs its command as a child process
BUDGET["salloc"] = ALLOCATING | {
    "contextlib",
    "fcntl",
    "locale",
    "subprocess",
    "threading",
    "warnings",
}


@pytest.mark.parametrize("command", sorted(BUDGET))
def test_command_imports_only_what_it_needs(command: str) -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        f"import client.{command}\n"
        "print(' '.join(sorted(m for m in set(sys.modules) - before if not m.startswith('_'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    imported = set(out.stdout.split()) - {f"client.{command}"}
    extra = sorted(imported - COMMON - BUDGET[command])
    assert not extra, f"{command} now imports {extra}: each costs every call start-up time"
