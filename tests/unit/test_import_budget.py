"""Each command's import graph, module by module: a command that starts importing more
than it needs fails here, naming the new modules (issue 16: commands at the
interpreter's floor). Grow a budget only with a reason a user would accept for every
call of that command paying the import."""

from __future__ import annotations

import subprocess
import sys

import pytest

# What every command needs: the JSON-over-HTTP client (corral.rest over _socket, JSON
# through the C accelerator in corral.cjson), the error tree, identity (pwd).
# Underscored C modules (_json, _socket, _signal) are not listed. Not here, and each a
# failure when a command starts importing it: json and re (with enum, functools,
# collections), socket and selectors, signal, shlex, dataclasses, typing.
COMMON = {
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
    "pwd",
}
# the typed views of replies (client/views/: a few small pure modules, read on access,
# over corral.wire.views, their scalar fields generated from the proto)
VIEWS = {
    f"client.views{m}" for m in ("", ".accounting", ".job", ".node", ".spec", ".step", ".usage")
} | {"corral.wire.views"}
QUERY = {"client.fmt", "client.options", "corral.slurmfmt"} | VIEWS
# enum, with what it brings: the signal and socket modules build enums at import
ENUM = {"collections", "enum", "functools", "itertools", "keyword", "operator", "reprlib", "types"}
# re, with what it brings (sacct imports it only to parse -S/-E times)
RE = ENUM | {"copyreg", "re", "re._casefix", "re._compiler", "re._constants", "re._parser"}
BUDGET: dict[str, set[str]] = {
    # corral.jobsyntax only with --array or --dependency; client.containeropts is the
    # table's --container-* entries (corral.containerspec only when one is given)
    "sbatch": {"client.containeropts", "client.jobopts", "client.options", "corral.slurmfmt"},
    "squeue": QUERY | {"client.fieldmasks", "client.squeue_columns"},
    "sacct": QUERY
    | {"client.acctfields", "client.ettr_fields", "client.fieldmasks", "client.sacct_values"}
    | {"corral.ettr"},
    "sprio": QUERY,
    "sshare": QUERY,
    "sreport": QUERY | {"client.acctfields", "client.sreport_tree"},
    "sacctmgr": {"client.options"},
    # client.nodepower: power saving's state words (issue 27), corral.nodewords: the
    # reservation's (issue 36), both standard library-free
    "sinfo": QUERY
    | {"client.fieldmasks", "client.nodepower", "client.sinfo_columns", "corral.hostlist"}
    | {"corral.nodewords", "itertools"},
    "scontrol": QUERY
    | {"client.jobids", "client.nodepower", "client.scontrol_show", "client.scontrol_update"}
    | {"corral.nodewords", "corral.patterns"},
    "scancel": QUERY | {"corral.signals"},
}
# srun and salloc allocate (sbatch's options) and handle signals (corral.signals, over
# the C module _signal). srun streams its tasks over a socket of its own
# (client.taskstream over _socket, client.poller over select, struct, the built-in
# SHA-256 for the step credential's proof): no grpc, protobuf, asyncio or OpenSSL, and
# none of socket, selectors or signal (with the enum each builds: ~5-10 ms). What it
# imports only while running is checked by tests/integration/test_task_stream.py
# (-X importtime).
SOCKET = {"array", "errno", "math", "select", "selectors", "socket"}
ALLOCATING = BUDGET["sbatch"] | {"client.alloc", "corral.signals"}
BUDGET["srun"] = ALLOCATING | {
    "client.srun_exits",
    "client.srun_output",
    "client.srun_step",
    "client.srun_terminal",
    "client.views",
    "client.views.job",
    "client.views.spec",
    "client.views.step",
    "client.views.usage",
    "corral.wire.views",
    "client.poller",
    "client.taskstream",
    "corral.patterns",
    "corral.stepstream",
    "corral.tasks",
    "select",
    "struct",
}
# salloc runs its command as a child process (subprocess; locale brings re)
BUDGET["salloc"] = (
    ALLOCATING
    | {"collections.abc", "corral.jobsyntax", "signal"}
    | ENUM
    | SOCKET
    | RE
    | {
        "contextlib",
        "fcntl",
        "locale",
        "subprocess",
        "threading",
        "warnings",
    }
)


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
