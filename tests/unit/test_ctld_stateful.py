"""Hypothesis state machine of ctld on the in-process harness (real store and Cluster,
recording dispatcher, manual clock): random sequences of what users and nodes do,
with ctld restarts from its store file in between, checked against the invariants
that must hold after every step:

- every job is in exactly one state, and the queue index holds every PENDING one, in order;
- no node is oversubscribed: its allocations are those of the jobs running on it, within
  its CPUs and memory, and a GPU index is held by one job at most;
- every acknowledged job survives a restart in the same state, with the same story;
- each job's story (its events) replays through jobstate's table to its current state.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from corral.errors import CorralError, InvalidTransition
from corral.identity import Identity
from corral.testing.inprocess import InProcessCluster
from corral.wire import corral_pb2 as pb
from ctld.model import jobstate as js

USERS = [Identity("alice", 1000, 1000), Identity("bob", 1001, 1001)]
NODES = 2
CPUS, MEM_MB, GPUS = 8, 16384, 4
# failures a user's request may meet in a random history (a state it no longer fits,
# a step that finds its resources busy): anything else is a bug
EXPECTED_REFUSALS = (CorralError,)


class CtldMachine(RuleBasedStateMachine):
    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory(prefix="corral-stateful-")
        self.c: InProcessCluster | None = None
        self.acknowledged: set[int] = set()
        self.steps: dict[int, list[int]] = {}  # job -> running step ids srun would complete

    @initialize()
    def start(self) -> None:
        self.c = InProcessCluster(
            self.tmp.name, nodes=NODES, cpus_per_node=CPUS, memory_mb_per_node=MEM_MB,
            gpus_per_node=GPUS,
        )  # fmt: skip
        self.c.register_nodes()

    def teardown(self) -> None:
        if self.c is not None:
            self.c.stop()
        self.tmp.cleanup()

    @property
    def cluster(self) -> InProcessCluster:
        assert self.c is not None
        return self.c

    # ------------------------------------------------------------ users

    @rule(
        target=jobs,
        user=st.sampled_from(USERS),
        hold=st.booleans(),
        gpus=st.integers(0, GPUS),
        cpus=st.integers(1, CPUS),
        nodes=st.integers(1, NODES),
        allocation=st.booleans(),
    )
    def submit(
        self, user: Identity, hold: bool, gpus: int, cpus: int, nodes: int, allocation: bool
    ) -> int:
        """sbatch (a batch job) or salloc (an allocation: no script, released by salloc)."""
        reply = self.cluster.client(user).submit_job(
            {
                "spec": {
                    "name": "prop",
                    "script": "" if allocation else "#!/bin/sh\ntrue\n",
                    "workDir": "/tmp",
                    "hold": hold,
                    "nodesMin": nodes,
                    "cpusPerTask": cpus,
                    "gpusPerNode": gpus,
                    "timeLimitS": 600,
                    "allocationOnly": allocation,
                }
            }
        )
        job_id = int(reply["jobId"])
        self.acknowledged.add(job_id)
        return job_id

    @rule(job_id=consumes(jobs))
    def cancel(self, job_id: int) -> None:
        job = self.cluster.cluster.jobs.get(job_id)
        if job is None:
            return
        owner = Identity(job.user, job.uid, job.gid)
        with contextlib.suppress(*EXPECTED_REFUSALS):
            self.cluster.client(owner).cancel_jobs({"filter": {"jobIds": [str(job_id)]}})

    @rule(job_id=jobs, hold=st.booleans())
    def hold_or_release(self, job_id: int, hold: bool) -> None:
        job = self.cluster.cluster.jobs.get(job_id)
        if job is None:
            return
        owner = Identity(job.user, job.uid, job.gid)
        action = "JOB_UPDATE_HOLD" if hold else "JOB_UPDATE_RELEASE"
        self.cluster.client(owner).update_job({"jobIds": [str(job_id)], "action": action})

    # ------------------------------------------------------------ ctld and the nodes

    @rule()
    def schedule(self) -> None:
        self.cluster.settle()

    @rule(seconds=st.floats(0.5, 120))
    def time_passes(self, seconds: float) -> None:
        """The clock moves on, and ctld's timers (heartbeat check, time limits) run."""
        self.cluster.tick(seconds)

    @rule()
    def heartbeats(self) -> None:
        self.cluster.heartbeat()

    @rule(job_id=jobs, code=st.integers(0, 3))
    def batch_script_exits(self, job_id: int, code: int) -> None:
        job = self.cluster.cluster.jobs.get(job_id)
        if job is None or job.state not in js.ON_NODE:
            return
        self.cluster.exit(job_id, exit_code=code)

    @rule(job_id=jobs, code=st.integers(0, 2))
    def allocation_released(self, job_id: int, code: int) -> None:
        """salloc's command ended: it releases its allocation (CompleteJob)."""
        job = self.cluster.cluster.jobs.get(job_id)
        if job is None:
            return
        owner = Identity(job.user, job.uid, job.gid)
        with contextlib.suppress(*EXPECTED_REFUSALS):  # not an allocation, or not running
            self.cluster.client(owner).complete_job({"jobId": str(job_id), "exitCode": code})

    @rule(node=st.integers(0, NODES - 1))
    def node_registers_again(self, node: int) -> None:
        """A noded restart: it reports no running jobs, so ctld ends those it had there."""
        self.cluster.register_nodes([self.cluster.node_names[node]])

    @rule(job_id=jobs, overlap=st.booleans())
    def step_created(self, job_id: int, overlap: bool) -> None:
        job = self.cluster.cluster.jobs.get(job_id)
        if job is None or job.state != js.RUNNING:
            return
        owner = Identity(job.user, job.uid, job.gid)
        try:
            reply = self.cluster.client(owner).create_step(
                {
                    "spec": {
                        "jobId": str(job_id),
                        "name": "step",
                        "argv": ["true"],
                        "overlap": overlap,
                    }
                }
            )
        except EXPECTED_REFUSALS:
            return  # busy (StepBusy) or no longer fits: refused, nothing changed
        self.steps.setdefault(job_id, []).append(int(reply["step"].get("stepId", 0)))

    @precondition(lambda self: any(self.steps.values()))
    @rule(data=st.data())
    def step_completed(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(j for j, s in self.steps.items() if s)))
        step_id = self.steps[job_id].pop(0)
        job = self.cluster.cluster.jobs.get(job_id)
        if job is None:
            return
        owner = Identity(job.user, job.uid, job.gid)
        with contextlib.suppress(*EXPECTED_REFUSALS):  # the job may have ended meanwhile
            self.cluster.client(owner).complete_step(
                {"jobId": str(job_id), "stepId": step_id, "exitCode": 0}
            )

    @rule()
    def ctld_restarts(self) -> None:
        """A new Cluster from the same store file keeps every acknowledged job as it was."""
        before = {
            j.job_id: (int(j.state), [(e.event, e.to_state) for e in j.events])
            for j in self.cluster.cluster.jobs.values()
        }
        self.cluster.restart()
        after = self.cluster.cluster.jobs
        ctld = self.cluster.cluster
        for job_id in self.acknowledged:
            if job_id not in after:
                # finished longer than MinJobAge ago: out of memory by design, in the store
                stored = ctld.store.query_jobs(
                    job_ids=[job_id], users=[], states=[], start_after=0, end_before=0, limit=1
                )
                assert stored, f"acknowledged job {job_id} lost in a restart"
                ended = stored[0]
                assert ended.state in js.FINISHED, f"job {job_id} not loaded though active"
                assert self.cluster.clock() - ended.end_time > ctld.config.controller.min_job_age_s
                continue
            if job_id in before:
                state, story = before[job_id]
                job = after[job_id]
                assert int(job.state) == state, f"job {job_id} changed state in a restart"
                assert [(e.event, e.to_state) for e in job.events][: len(story)] == story

    # ------------------------------------------------------------ invariants

    @invariant()
    def one_state_per_job_and_a_true_queue_index(self) -> None:
        if self.c is None:
            return
        cluster = self.c.cluster
        for job_id, job in cluster.jobs.items():
            assert job.job_id == job_id
            assert int(job.state) in js.ACTIVE | js.FINISHED, (job_id, job.state)
        # the index holds every PENDING job, in submit order; entries of jobs that left
        # the queue since are dropped lazily, at the next snapshot
        pending = {i for i, j in cluster.jobs.items() if j.state == js.PENDING}
        index = list(cluster.state.index.pending)
        assert pending <= set(index), (
            f"pending jobs outside the queue index: {pending - set(index)}"
        )
        queued = [cluster.jobs[i].submit_time for i in index if i in pending]
        assert queued == sorted(queued), "queue index out of submit order"
        # what submit-time accounting limits count, kept by the commit step
        active = Counter(
            (j.account, j.user, j.qos) for j in cluster.jobs.values() if j.state in js.ACTIVE
        )
        assert cluster.state.index.active_counts == active

    @invariant()
    def no_node_is_oversubscribed(self) -> None:
        if self.c is None:
            return
        cluster = self.c.cluster
        on_node = [j for j in cluster.jobs.values() if j.state in js.ON_NODE]
        for name, node in cluster.nodes.items():
            allocs = [(j.job_id, a) for j in on_node for a in j.allocations if a.node == name]
            assert node.job_ids == {job_id for job_id, _ in allocs}, name
            cpus = sum(a.cpus for _, a in allocs)
            mem = sum(a.mem_mb for _, a in allocs)
            gpus = Counter(g for _, a in allocs for g in a.gpu_indices)
            assert cpus <= node.resources.cpus and cpus == node.alloc_cpus, name
            assert mem <= node.resources.memory_mb, name
            assert all(n == 1 for n in gpus.values()), f"{name}: a GPU held twice {gpus}"
            assert set(gpus) == node.alloc_gpus and set(gpus) <= set(node.gpu_indices), name

    @invariant()
    def every_story_replays_to_the_current_state(self) -> None:
        if self.c is None:
            return
        for job in self.c.cluster.jobs.values():
            replay = pb.Job(job_id=job.job_id)  # state NEW
            for e in job.events:
                assert e.from_state == replay.state, (job.job_id, e.event)
                try:
                    js.transition(replay, e.event, cause=e.cause, now=e.time, to=e.to_state)
                except InvalidTransition as exc:
                    raise AssertionError(
                        f"job {job.job_id}'s story does not replay: {exc}"
                    ) from None
            assert replay.state == job.state, job.job_id


CtldMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_ctld_state_machine = CtldMachine.TestCase
