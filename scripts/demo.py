"""``make demo``: a local cluster on SQLite running a real sample batch job.

With NVIDIA GPUs that NVML sees, one node with this machine's real GPUs (corral up
--gpus auto); without, 2 nodes of 8 fake GPUs each.

Starts the cluster (corral up), submits examples/sample-job.sh with sbatch, waits for
it, prints squeue, sacct and the job's output, and leaves the cluster running so
you can keep using it (``make down`` stops it).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent


def warn_if_private() -> None:
    """As root, the cluster runs every user's jobs as them, and their scripts call this
    venv's commands: say so, and what to do, when its Python is root's alone."""
    from shared_python import blocked_at

    blocked = blocked_at(sys.executable) if os.geteuid() == 0 else ""
    if blocked:
        print(
            f"demo: warning: other users cannot run this venv's Python ({sys.executable}: "
            f"{blocked} is not searchable by them), so their jobs' srun and scontrol fail. "
            "`rm -rf .venv && make demo` builds it again from a Python every user can run",
            file=sys.stderr,
            flush=True,
        )


def sh(env: dict[str, str], *argv: str, cwd: pathlib.Path) -> str:
    print(f"$ {' '.join(argv)}", flush=True)
    out = subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        env=env,
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=60,
    )
    text = out.stdout + out.stderr
    print(text, end="" if text.endswith("\n") or not text else "\n", flush=True)
    if out.returncode != 0:
        raise SystemExit(f"{argv[0]} failed with exit code {out.returncode}")
    return out.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", default=str(ROOT / ".state" / "demo"))
    args = parser.parse_args()
    state = pathlib.Path(args.state_dir).resolve()
    warn_if_private()
    subprocess.run(
        [str(BIN / "corral"), "down", "--state-dir", str(state)], check=False, capture_output=True
    )
    store = state / "corral.db"
    if store.exists():  # an earlier demo's store: bring its schema up to this ctld's
        subprocess.run(
            [str(BIN / "corral"), "db", "upgrade", "--url", f"sqlite:///{store}"], check=True
        )
    subprocess.run(
        [
            str(BIN / "corral"),
            "up",
            "--gpus",
            "auto",
            "--gpus-per-node",
            "8",
            "--state-dir",
            str(state),
        ],
        check=True,
    )
    env = dict(os.environ)
    for line in (state / "env.sh").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            env[key] = value.strip('"').replace("$PATH", os.environ.get("PATH", ""))
    work = state / "work"
    work.mkdir(exist_ok=True)
    job_id = sh(
        env, "sbatch", "--parsable", str(ROOT / "examples" / "sample-job.sh"), cwd=work
    ).strip()
    sh(env, "squeue", cwd=work)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state_now = subprocess.run(
            [str(BIN / "sacct"), "-j", job_id, "-X", "-n", "-P", "-o", "State"],
            env=env,
            cwd=work,
            text=True,
            capture_output=True,
        ).stdout.strip()
        if state_now and state_now not in ("PENDING", "RUNNING", "COMPLETING"):
            break
        time.sleep(0.2)
    sh(
        env,
        "sacct",
        "-j",
        job_id,
        "-o",
        "JobID,JobName,Partition,State,ExitCode,Elapsed,NodeList,AllocTRES%40",
        cwd=work,
    )
    output = work / f"sample-{job_id}.out"
    print(f"--- {output}")
    print(output.read_text(), end="")
    print("---")
    print(f"The cluster is still running. Use it with:  source {state}/env.sh")
    print(f"Stop it with:  make down   (or: corral down --state-dir {state})")
    return 0 if state_now == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main())
