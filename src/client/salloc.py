"""salloc: get an allocation, run a command in it (default: the user's shell), release it.

The command runs here, with the allocation's SLURM_* variables; inside it, srun starts
steps on the allocated nodes. salloc exits with the command's exit code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from client.alloc import (
    allocation_environment,
    allocation_options,
    release,
    request_allocation,
)
from client.common import option_errors, run
from client.containeropts import pyxis_environ
from client.jobopts import merge, with_umask
from client.options import FLAG, Option, OptionParser, answered
from corral.api import connect

PROG = "salloc"
OPTIONS = (
    *allocation_options(),
    Option("Q", "quiet", "quiet", FLAG, help="fewer messages"),
    Option("v", "verbose", "verbose", FLAG, help="more messages"),
    Option("h", "help", "help", FLAG, help="show this help"),
    Option("V", "version", "version", FLAG, help="show the version"),
)


def salloc(argv: list[str]) -> int:
    parser = OptionParser(PROG, OPTIONS, usage=f"{PROG} [OPTIONS...] [command [args...]]")
    with option_errors():  # 255, as Slurm's salloc
        cli, command = parser.parse(argv)
    if answered(parser, cli):
        return 0
    for key in ("quiet", "verbose"):
        cli.pop(key, None)
    if not command:
        command = [os.environ.get("SHELL") or "/bin/sh"]
    api = connect()  # the gateway, as srun inside it
    with option_errors():
        opts = merge(parser, cli, "", pyxis_environ(os.environ))
    job_id = request_allocation(api, PROG, opts, argv, os.path.basename(command[0]))
    code, sig = 1, 0
    try:
        job = api.get_jobs({"filter": {"jobIds": [job_id]}})["jobs"][0]
        environ = dict(os.environ)  # SLURM_UMASK too: srun inside keeps salloc's umask
        env = with_umask({**environ, **allocation_environment(job, "")}, environ)
        proc = subprocess.Popen(command, env=env)
        # Ctrl-C is the command's (the terminal sends it there too); SIGTERM and SIGHUP
        # go on to it, and salloc releases the allocation once it has ended
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda signum, frame: proc.send_signal(signum))
        rc = proc.wait()
        code, sig = (0, -rc) if rc < 0 else (rc, 0)
    except FileNotFoundError:
        sys.stderr.write(f"{PROG}: error: {command[0]}: command not found\n")
        code = 127
    finally:
        release(api, PROG, job_id, code, sig)
    return code if not sig else 128 + sig


def main() -> None:
    run(PROG, lambda: salloc(sys.argv[1:]))
