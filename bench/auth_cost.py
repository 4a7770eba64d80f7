"""What authentication costs per submit: local (Unix socket, SO_PEERCRED), JWT and MUNGE.

For each method: held SubmitJob calls through the HTTP gateway with corral.rest.Client
(sequential, one connection per call), ``sbatch -H`` end to end, and ctld's own cost
of verifying one request (ClusterAuthenticator.identify, in-process). The cluster runs
with ``auth.type = "munge"`` and a JWT key, so every method works at once; munged is
the bench's own (corral.testing.munge).

Today's figure, for comparison: the same calls before authentication existed (claimed
headers over TCP), measured on main before this change and written in bench/README.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from bench.common import (
    VENV_BIN,
    PhaseResult,
    Table,
    bench_cluster,
    cancel_all,
    log,
    ms,
    phase_main,
    run_cmd,
    summary,
)
from corral.api import HttpController as Client


def _spec(work_dir: str) -> dict[str, Any]:
    return {
        "spec": {
            "name": "bench",
            "script": "#!/bin/sh\ntrue\n",
            "workDir": work_dir,
            "stdoutPattern": "/dev/null",
            "hold": True,
        }
    }


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs"


def _timed(n: int, call: Callable[[], object]) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def verify_cost(jwt_key: bytes, munge_socket: str, n: int) -> dict[str, list[float]]:
    """ctld's side alone: one identify() per request, as the gateway calls it."""
    import pwd

    from corral.auth import munge, tokens
    from corral.config import AuthConfig
    from ctld.api.auth import Caller, ClusterAuthenticator

    auth = ClusterAuthenticator(AuthConfig(type="munge", munge_socket=munge_socket), jwt_key)
    user = pwd.getpwuid(os.getuid()).pw_name
    token = tokens.issue(jwt_key, user, 3600)
    local = Caller({}, "SubmitJob", os.getuid(), os.getgid())
    bearer = Caller({"authorization": f"Bearer {token}"}, "SubmitJob")
    creds = [munge.encode(b"corral:SubmitJob", munge_socket) for _ in range(n)]
    it = iter(creds)
    return {
        "local": _timed(n, lambda: auth.identify(local)),
        "jwt": _timed(n, lambda: auth.identify(bearer)),
        "munge": _timed(
            n, lambda: auth.identify(Caller({"x-corral-munge": next(it)}, "SubmitJob"))
        ),
    }


def run(quick: bool = False) -> PhaseResult:
    from corral.testing.munge import Munged

    n_calls = 100 if quick else 300
    n_cmds = 10 if quick else 30
    result = PhaseResult("auth_cost", {"jobs": "held", "calls": n_calls, "sbatch": n_cmds})
    table = Table(
        "Authentication per submit (held jobs, sequential)",
        ["method", "path", "n", "p50", "p95"],
    )
    munged = Munged()
    try:
        with bench_cluster("auth", auth_type="munge", munge_socket=munged.socket) as cluster:
            work = str(cluster.work_dir)
            host, _, port = cluster.http_address.rpartition(":")
            token = cluster.token(os.environ.get("USER") or "root")
            tcp_env = {"CORRAL_AUTH_TYPE": "munge", "CORRAL_MUNGE_SOCKET": munged.socket}
            clients: dict[str, Callable[[], Client]] = {
                "local (Unix socket)": lambda: Client(socket_path=cluster.socket),
                "jwt (TCP)": lambda: Client((host, int(port)), socket_path="", token=token),
                "munge (TCP)": lambda: Client((host, int(port)), socket_path=""),
            }
            os.environ.update(tcp_env)  # what the munge client reads
            for name, make in clients.items():
                cancel_all(cluster)
                client = make()
                spec = _spec(work)
                log(f"auth: {name}, {n_calls} SubmitJob calls")
                s = summary(_timed(n_calls, lambda c=client, sp=spec: c.call("SubmitJob", sp)))
                table.add(
                    name, "SubmitJob, corral.rest.Client", n_calls, ms(s["median"]), ms(s["p95"])
                )
                result.data[f"call {name}"] = s
            base_env = cluster.env()
            envs = {
                "local (Unix socket)": base_env,
                "jwt (TCP)": {
                    **{k: v for k, v in base_env.items() if k != "CORRAL_CTLD_SOCKET"},
                    "SLURM_JWT": token,
                },
                "munge (TCP)": {
                    **{k: v for k, v in base_env.items() if k != "CORRAL_CTLD_SOCKET"},
                    **tcp_env,
                },
            }
            argv = [str(VENV_BIN / "sbatch"), "-H", "-o", "/dev/null", "--wrap", "true"]
            for name, env in envs.items():
                cancel_all(cluster)
                log(f"auth: {name}, {n_cmds} x sbatch -H")
                lat = []
                for _ in range(n_cmds):
                    dt, proc = run_cmd(argv, env, work)
                    if proc.returncode != 0:
                        raise RuntimeError(f"sbatch ({name}) failed: {proc.stderr}")
                    lat.append(dt)
                s = summary(lat)
                table.add(name, "sbatch -H (whole command)", n_cmds, ms(s["median"]), ms(s["p95"]))
                result.data[f"sbatch {name}"] = s
            key = cluster.jwt_key_path.read_bytes()
        for name, samples in verify_cost(key, munged.socket, n_calls).items():
            s = summary(samples)
            table.add(name, "ctld verifies one request", n_calls, _us(s["median"]), _us(s["p95"]))
            result.data[f"verify {name}"] = s
    finally:
        munged.stop()
    table.notes.append(
        "before authentication (claimed headers over TCP, e4b2837): see bench/README.md"
    )
    result.tables.append(table)
    return result


if __name__ == "__main__":
    phase_main(run)
