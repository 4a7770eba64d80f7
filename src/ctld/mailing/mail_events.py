"""Which mail a job's change sends, with Slurm's subjects (slurmctld's mail_job_info):

    Slurm Job_id=12 Name=train Began, Queued time 00:00:01
    Slurm Job_id=12 Name=train Ended, Run time 00:05:01, COMPLETED, ExitCode 0
    Slurm Job_id=12 Name=train Failed, Run time 00:05:01, FAILED, ExitCode 127
    Slurm Job_id=12 Name=train Reached 80% of time limit, Run time 00:08:00
    Slurm Array Task Job_id=40_2 (42) Name=sweep Began, Queued time 00:00:03
    Slurm Array Summary Job_id=40_* (40) Name=sweep Ended, Mixed, ExitCode [0-1]

An observer of the commit step (each mail follows a durable change) and a watch that
sends the time-limit warnings and INVALID_DEPEND, once each per run.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from corral import mailtypes as mt
from corral.errors import CorralError
from corral.reasons import Reason
from corral.slurmfmt import format_elapsed
from corral.wire import corral_pb2 as pb
from ctld.core.state import State
from ctld.mailing.mail import Mail, Mailer
from ctld.model import jobstate as js

log = structlog.get_logger("ctld.mailing.mail")

WATCH_S = 5.0  # how often the time-limit warnings and dependencies are looked at
WORDS = {
    mt.BEGIN: "Began",
    mt.END: "Ended",
    mt.FAIL: "Failed",
    mt.REQUEUE: "Requeued",
    mt.INVALID_DEPEND: "Invalid dependency",
    mt.TIME_LIMIT: "Reached time limit",
    mt.TIME_LIMIT_90: "Reached 90% of time limit",
    mt.TIME_LIMIT_80: "Reached 80% of time limit",
    mt.TIME_LIMIT_50: "Reached 50% of time limit",
}
_GOOD_END = frozenset({js.COMPLETED, js.CANCELLED})
_ZERO_CODE = frozenset({js.CANCELLED, js.TIMEOUT})  # sacct's job line says 0:0 for them


def mail_types(job: pb.Job) -> frozenset[str]:
    try:
        return mt.parse_mail_types(job.spec.mail_type)
    except CorralError:  # refused at submit; an older record: no mail
        return frozenset()


def term_info(job: pb.Job) -> str:
    """ ", STATE, ExitCode N" of an ended job (", STATE" when a signal ended it)."""
    state = js.state_name(job.state)
    if job.state in _ZERO_CODE:
        return f", {state}, ExitCode 0"
    if job.exit_signal:
        return f", {state}"
    return f", {state}, ExitCode {job.exit_code}"


def job_time(job: pb.Job, kind: str, now: float) -> tuple[str, dict[str, str]]:
    if kind == mt.BEGIN and job.start_time and job.submit_time:
        queued = format_elapsed(job.start_time - job.submit_time)
        return f", Queued time {queued}", {"SLURM_JOB_QUEUED_TIME": queued}
    end = job.end_time if kind in (mt.END, mt.FAIL, mt.REQUEUE, mt.TIME_LIMIT) else 0.0
    if kind in mt.TIME_FRACTIONS:
        end = now
    if job.start_time and end:
        ran = format_elapsed(max(0.0, end - job.start_time))
        return f", Run time {ran}", {"SLURM_JOB_RUN_TIME": ran}
    return "", {}


class MailEvents:
    def __init__(self, state: State, mailer: Mailer) -> None:
        self.state = state
        self.mailer = mailer
        self.config = state.config.mail
        self.warned: dict[int, set[str]] = {}  # time-limit warnings sent, per run
        self.began_arrays: set[int] = set()

    # ------------------------------------------------------------ the observer

    def __call__(self, job: pb.Job, events: Sequence[pb.JobEvent]) -> None:
        if not job.spec.mail_type:
            return
        types = mail_types(job)
        for ev in events:
            if ev.event == "started":
                self.warned.pop(job.job_id, None)
                if mt.BEGIN in types:
                    self._begin(job, types)
            elif ev.event == "requeued" and mt.REQUEUE in types:
                self.send(job, mt.REQUEUE, ev.time)
            elif ev.to_state in js.FINISHED:
                self._ended(job, types, ev.time)
                self.warned.pop(job.job_id, None)

    def _begin(self, job: pb.Job, types: frozenset[str]) -> None:
        array = job.array_job_id
        if array and mt.ARRAY_TASKS not in types:
            if array in self.began_arrays:
                return  # the array as a whole began with its first task
            self.began_arrays.add(array)
        self.send(job, mt.BEGIN, job.start_time)

    def _ended(self, job: pb.Job, types: frozenset[str], now: float) -> None:
        if job.state == js.TIMEOUT and mt.TIME_LIMIT in types:
            self.send(job, mt.TIME_LIMIT, now)
        never = job.state == js.CANCELLED and job.reason == Reason.DEPENDENCY_NEVER_SATISFIED
        if never and mt.INVALID_DEPEND in types - self.warned.get(job.job_id, set()):
            self.send(job, mt.INVALID_DEPEND, now)  # unless the watch sent it while pending
        kind = mt.END if mt.END in types else ""
        if job.state not in _GOOD_END and mt.FAIL in types:
            kind = mt.FAIL
        if not kind:
            return
        if job.array_job_id and mt.ARRAY_TASKS not in types:
            self._array_ended(job, kind, now)
        else:
            self.send(job, kind, now)

    def _array_ended(self, job: pb.Job, kind: str, now: float) -> None:
        """Without ARRAY_TASKS an array mails once, when its last task ends."""
        jobs = self.state.jobs
        ids = self.state.index.array_tasks.get(job.array_job_id, ())
        tasks = [jobs[i] for i in ids if i in jobs] or [job]
        if any(t.state not in js.FINISHED for t in tasks):
            return
        self.began_arrays.discard(job.array_job_id)
        codes = [0 if t.state in _ZERO_CODE else t.exit_code for t in tasks]
        low, high = min(codes), max(codes)
        failed = any(t.state not in _GOOD_END for t in tasks)
        state = "Mixed" if low == 0 and high > 0 else js.state_name(job.state)
        if kind == mt.END and failed and mt.FAIL in mail_types(job):
            kind = mt.FAIL
        name = job.spec.name
        subject = (
            f"Slurm Array Summary Job_id={job.array_job_id}_* ({job.array_job_id}) "
            f"Name={name} {WORDS[kind]}, {state}, ExitCode [{low}-{high}]"
        )
        env = {"SLURM_JOB_EXIT_CODE_MIN": str(low), "SLURM_JOB_EXIT_CODE_MAX": str(high)}
        self._queue(job, kind, subject, env)

    # ------------------------------------------------------------ the watch

    async def run(self) -> None:
        """Every WATCH_S: time-limit warnings of running jobs, dependencies that can
        never be satisfied (a job kept pending with DependencyNeverSatisfied)."""
        while True:
            await self.state.clock.sleep(WATCH_S)
            try:
                self.watch(self.state.clock())
            except Exception:
                log.exception("mail watch failed")

    def watch(self, now: float) -> None:
        jobs = self.state.jobs
        for job_id in list(self.state.index.active_ids):
            job = jobs.get(job_id)
            if job is None or not job.spec.mail_type:
                continue
            types = mail_types(job)
            done = self.warned.setdefault(job_id, set())
            if job.state == js.PENDING:
                if (
                    mt.INVALID_DEPEND in types
                    and job.reason == Reason.DEPENDENCY_NEVER_SATISFIED
                    and mt.INVALID_DEPEND not in done
                ):
                    done.add(mt.INVALID_DEPEND)
                    self.send(job, mt.INVALID_DEPEND, now)
                continue
            if job.state != js.RUNNING or job.time_limit_s <= 0 or not job.start_time:
                continue
            ran = now - job.start_time
            # the highest fraction reached only: a job seen late gets one warning
            for kind in (mt.TIME_LIMIT_90, mt.TIME_LIMIT_80, mt.TIME_LIMIT_50):
                if ran >= mt.TIME_FRACTIONS[kind] * job.time_limit_s:
                    if kind in types and kind not in done:
                        self.send(job, kind, now)
                    done.update(
                        k
                        for k in mt.TIME_FRACTIONS
                        if mt.TIME_FRACTIONS[k] <= mt.TIME_FRACTIONS[kind]
                    )
                    break
        for job_id in [i for i in self.warned if i not in self.state.index.active_ids]:
            del self.warned[job_id]

    # ------------------------------------------------------------ one mail

    def send(self, job: pb.Job, kind: str, now: float) -> None:
        when, env = job_time(job, kind, now)
        term = term_info(job) if kind in (mt.END, mt.FAIL) else ""
        if job.array_job_id and job.HasField("array_task_id"):
            head = (
                f"Slurm Array Task Job_id={job.array_job_id}_{job.array_task_id} "
                f"({job.job_id}) Name={job.spec.name}"
            )
        else:
            head = f"Slurm Job_id={job.job_id} Name={job.spec.name}"
        if kind in (mt.END, mt.FAIL):
            code = "0" if job.state in _ZERO_CODE or job.exit_signal else str(job.exit_code)
            env["SLURM_JOB_EXIT_CODE_MAX"] = code
        self._queue(job, kind, f"{head} {WORDS[kind]}{when}{term}", env)

    def _queue(self, job: pb.Job, kind: str, subject: str, extra: dict[str, str]) -> None:
        env = {
            "SLURM_CLUSTER_NAME": job.cluster or self.state.config.cluster_name,
            "SLURM_JOB_ACCOUNT": job.account,
            "SLURM_JOB_ID": str(job.job_id),
            "SLURM_JOB_NAME": job.spec.name,
            "SLURM_JOB_PARTITION": job.partition,
            "SLURM_JOB_UID": str(job.uid),
            "SLURM_JOB_USER": job.user,
            "SLURM_JOB_WORK_DIR": job.spec.work_dir,
            "SLURM_JOB_STATE": js.state_name(job.state),
            "SLURM_JOB_MAIL_TYPE": WORDS[kind],
            **extra,
        }
        if job.array_job_id:
            env["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
            if job.HasField("array_task_id"):
                env["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)
        to = self.config.recipient(job.spec.mail_user, job.user)
        self.mailer.send(Mail(to=to, subject=subject, job_id=job.job_id, env=env))
