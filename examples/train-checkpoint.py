#!/usr/bin/env python3
"""A training loop that survives node failures: it saves and resumes (no GPU needed).

Run it under sbatch (``examples/train-checkpoint.sh``) or alone. It follows corral's
checkpoint contract (docs/reliability.md):

- state goes to ``$CORRAL_CHECKPOINT_DIR`` (the same directory on every run of the
  job; put ``noded.checkpoint_dir`` on shared storage so another node finds it), written
  atomically (write a temporary file, then rename), so a kill never leaves half a file;
- on start it loads the latest checkpoint, if any, and says so;
- ``SLURM_RESTART_COUNT`` tells which run this is;
- the ``--signal`` warning (SIGUSR1 by default here) before the time limit or a
  maintenance window makes it save at once;
- each step touches ``$CORRAL_PROGRESS_FILE`` when set (the opt-in progress heartbeat
  that lets noded tell a hung job from a slow one; each srun task has its own);
- started by srun as several tasks (data-parallel ranks), only rank 0
  (``SLURM_PROCID``) saves; every rank loads the same checkpoint.

Every step also appends ``run=<restart count> host=<node> step=<n> rank=<r>`` to
``steps.log`` in the checkpoint directory: the tests read it to prove that the job
resumed where it stopped and that no two copies ever ran at once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time


def save(ckpt_dir: str, step: int, loss: float) -> None:
    path = os.path.join(ckpt_dir, "checkpoint.json")
    with open(path + ".tmp", "w") as fh:
        json.dump({"step": step, "loss": loss, "time": time.time()}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(path + ".tmp", path)


def load(ckpt_dir: str) -> tuple[int, float]:
    try:
        with open(os.path.join(ckpt_dir, "checkpoint.json")) as fh:
            state = json.load(fh)
        return int(state["step"]), float(state["loss"])
    except (OSError, ValueError, KeyError):
        return 0, 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="train this many steps in all")
    parser.add_argument("--step-time", type=float, default=0.5, help="seconds per step")
    parser.add_argument("--save-every", type=int, default=1, help="checkpoint every N steps")
    parser.add_argument(
        "--stop-on-signal",
        action="store_true",
        help="exit after the checkpoint the signal asks for (a drain: requeued, resumed)",
    )
    args = parser.parse_args()

    ckpt_dir = os.environ.get("CORRAL_CHECKPOINT_DIR") or os.path.abspath("checkpoints")
    os.makedirs(ckpt_dir, exist_ok=True)
    run = os.environ.get("SLURM_RESTART_COUNT", "0")
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    progress = os.environ.get("CORRAL_PROGRESS_FILE", "")
    rank = int(os.environ.get("SLURM_PROCID", "0"))

    step, loss = load(ckpt_dir)
    if step:
        print(f"resumed from step {step} (run {run} on {host})", flush=True)
    else:
        print(f"starting fresh (run {run} on {host})", flush=True)

    def save_now(signum: int, _frame: object) -> None:
        if rank == 0:
            save(ckpt_dir, step, loss)
        print(f"signal {signal.Signals(signum).name}: checkpoint at step {step}", flush=True)
        if args.stop_on_signal:  # saved: the rest of the run is the requeued one's
            sys.exit(0)

    signal.signal(signal.SIGUSR1, save_now)

    with open(os.path.join(ckpt_dir, "steps.log"), "a") as log:
        while step < args.steps:
            time.sleep(args.step_time)  # the "work" of one step
            step += 1
            loss *= 0.9
            log.write(f"run={run} host={host} step={step} rank={rank} time={time.time():.3f}\n")
            log.flush()
            if progress:
                with open(progress, "a"):
                    os.utime(progress)
            if rank == 0 and step % args.save_every == 0:
                save(ckpt_dir, step, loss)
            print(f"step {step} loss {loss:.4f}", flush=True)
    print(f"done: {step} steps (run {run})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
