"""A step's output is never lost: noded's step runner against a slow reader."""

from __future__ import annotations

import asyncio
import getpass
import os
from collections.abc import AsyncIterator

from corral.wire import corral_pb2 as pb
from noded.steps import DRAIN_S, QUEUE_DEPTH, StepRunner

TOTAL = 20_000_000  # bytes: more than the queue holds, so the pumps wait on the reader


def test_a_slow_reader_gets_every_byte_though_a_child_holds_the_pipes() -> None:
    job = pb.Job(job_id=7, user=getpass.getuser(), uid=os.getuid(), gid=os.getgid())
    step = pb.Step(job_id=7, step_id=0, ntasks=1)
    step.nodes.add(node="n1", ranks=[0])
    step.spec.argv.extend(
        ["sh", "-c", f"sleep 30 & yes 0123456789abcdef | head -c {TOTAL}; echo END"]
    )

    async def verify(job_id: int, step_id: int) -> tuple[pb.Job, pb.Step, str]:
        return job, step, "cred"  # ctld's record and the step's credential

    async def inputs() -> AsyncIterator[pb.TaskInput]:
        yield pb.TaskInput(stdin_eof=True)  # then srun's half-close

    async def main() -> tuple[bytes, list[pb.TaskExit]]:
        # a marker of this process's own: other test runs on the host (same job id, same
        # marker) would otherwise find and kill this one's tasks when they clean up
        runner = StepRunner("n1", f"corral-test-{os.getpid()}-{{job_id}}", verify)
        start = pb.RunTasksRequest(
            job=job, step=step, node="n1", cwd="/tmp", step_credential="cred"
        )
        data, exits, seen = bytearray(), [], 0
        async for event in runner.run(start, inputs()):
            if event.HasField("output"):
                data += event.output.data
            elif event.HasField("exit"):
                exits.append(event.exit)
            seen += 1
            # slow enough that a full queue takes longer than DRAIN_S to empty
            await asyncio.sleep(1.5 * DRAIN_S / QUEUE_DEPTH)
        return bytes(data), exits

    data, exits = asyncio.run(asyncio.wait_for(main(), 120))
    assert len(data) == TOTAL + len(b"END\n") and data.endswith(b"789END\n")
    assert [(e.rank, e.exit_code, e.exit_signal) for e in exits] == [(0, 0, 0)]
