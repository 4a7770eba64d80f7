#!/usr/bin/env python3
"""Data-parallel torch training that resumes at another world size (docs/reliability.md).

Start it with srun inside an elastic job (``examples/torch-elastic.sh``): one rank per
task, ``torch.distributed`` initialised from the variables srun sets (``env://``:
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; LOCAL_RANK picks the GPU). It uses gloo on
CPU, NCCL when CUDA is there. It follows the elastic contract:

- rank 0 saves the model, the optimizer and the step to ``$CORRAL_CHECKPOINT_DIR``
  with ``torch.save`` (a temporary file, then a rename: atomic) every ``--save-every``
  steps; every run loads it first, whatever its world size;
- the global batch stays the same at any size: each rank takes ``global / WORLD_SIZE``
  samples (``SLURM_JOB_PREVIOUS_NTASKS`` says what it was before a requeue);
- on SIGUSR1 (a drain, a maintenance window, growth: corral's warning) the ranks agree
  at the next step, rank 0 saves, and all exit 0: the job is requeued and resumes.

Each step appends ``run=R world=W rank=0 step=N loss=L`` to ``steps.log`` in the
checkpoint directory (rank 0): the tests read it to see the world size change and no
step lost.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from datetime import timedelta
from typing import NoReturn

WANT_STOP = False


def _stop(_signum: int, _frame: object) -> None:
    global WANT_STOP
    WANT_STOP = True


# first, before torch's seconds of import: a warning that came meanwhile would otherwise
# kill this rank (SIGUSR1's default) and leave the others waiting for it
signal.signal(signal.SIGUSR1, _stop)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def save(path: str, state: dict[str, object]) -> None:
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--global-batch", type=int, default=48)
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--step-time", type=float, default=0.1, help="extra seconds per step")
    p.add_argument(
        "--timeout", type=float, default=300, help="seconds a rank waits for the others"
    )
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    # a rank that never comes (or dies) fails the others after --timeout, not torch's
    # default 30 minutes: the step fails and the job is requeued or ends, never hangs
    dist.init_process_group(
        "nccl" if cuda else "gloo", init_method="env://", timeout=timedelta(seconds=args.timeout)
    )
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")

    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    ckpt_dir = os.environ.get("CORRAL_CHECKPOINT_DIR") or os.path.abspath("checkpoints")
    path = os.path.join(ckpt_dir, "model.pt")
    step = 0
    if os.path.exists(path):  # every rank loads the same state, at any world size
        state = torch.load(path, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = int(state["step"])
    run = os.environ.get("SLURM_RESTART_COUNT", "0")
    before = os.environ.get("SLURM_JOB_PREVIOUS_NTASKS", "")
    if rank == 0:
        was = f" (was {before})" if before else ""
        print(f"run {run}: world size {world}{was}, from step {step}", flush=True)
    per_rank = max(1, args.global_batch // world)  # the same global batch at any size
    truth = torch.arange(16, dtype=torch.float32, device=device) / 16

    def checkpoint() -> None:
        if rank == 0:
            save(path, {"model": model.state_dict(), "opt": opt.state_dict(), "step": step})

    log = open(os.path.join(ckpt_dir, "steps.log"), "a") if rank == 0 else None
    while step < args.steps:
        gen = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(per_rank, 16, generator=gen).to(device)
        y = x @ truth + 0.01 * torch.randn(per_rank, generator=gen).to(device)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x).squeeze(-1), y)
        loss.backward()
        opt.step()
        step += 1
        time.sleep(args.step_time)
        if log is not None:
            log.write(f"run={run} world={world} rank={rank} step={step} loss={loss.item():.5f}\n")
            log.flush()
        if step % args.save_every == 0:
            checkpoint()
        # the warning reaches the ranks at different moments: they stop together
        flag = torch.tensor([1.0 if WANT_STOP else 0.0], device=device)
        dist.all_reduce(flag)
        if flag.item() > 0:
            checkpoint()
            if rank == 0:
                print(f"warned: saved at step {step}, exiting to be requeued", flush=True)
            leave_together()
    checkpoint()
    if rank == 0:
        print(f"done: {step} steps, loss {loss.item():.5f}", flush=True)
    leave_together()
    return 0


def leave_together() -> NoReturn:
    """Every rank leaves together (a barrier: rank 0 may still be saving), then at once:
    a gloo connection torn down by the peer that left first can abort a rank in its
    teardown ("terminate called without an active exception"), failing a step whose
    work was done. Nothing is left to write: the checkpoint is renamed in place and
    the output flushed."""
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
