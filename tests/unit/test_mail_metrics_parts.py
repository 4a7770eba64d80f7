"""The pure parts of mail (types, Slurm's subjects), the metrics ledger, sattach's
listeners on noded and the NVML probe of ``corral up --gpus``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from corral.errors import InvalidOption
from corral.gpuprobe import probe_nvml
from corral.mailconfig import MailConfig
from corral.mailtypes import ALL, parse_mail_types
from corral.wire import corral_pb2 as pb
from ctld.mailing.mail_events import job_time, term_info
from ctld.model import jobstate as js
from ctld.telemetry.metrics_ledger import MetricsLedger
from noded.attach import LISTENER_DEPTH, Listeners
from noded.steps import Chunk

pytestmark = pytest.mark.timeout(30)


def test_mail_types_parse_as_slurm_parses_them() -> None:
    assert parse_mail_types("begin,End") == {"BEGIN", "END"}
    assert parse_mail_types("ALL") == ALL
    assert "TIME_LIMIT_80" not in ALL and "ARRAY_TASKS" not in ALL
    assert parse_mail_types("END,NONE") == frozenset()
    assert parse_mail_types("TIME_LIMIT_90,ARRAY_TASKS") == {"TIME_LIMIT_90", "ARRAY_TASKS"}
    with pytest.raises(InvalidOption, match="--mail-type=BOGUS invalid"):
        parse_mail_types("BOGUS")


def test_recipient_and_sender() -> None:
    cfg = MailConfig(smtp_host="h", domain="lab.example")
    assert cfg.recipient("", "alice") == "alice@lab.example"
    assert cfg.recipient("bob@else.org", "alice") == "bob@else.org"
    assert MailConfig(sender="corral@x").from_address() == "corral@x"


def job(state: int, code: int = 0, sig: int = 0) -> pb.Job:
    return pb.Job(
        job_id=7,
        state=state,
        exit_code=code,
        exit_signal=sig,
        submit_time=100.0,
        start_time=101.0,
        end_time=401.0,
    )


def test_subject_parts_are_slurms() -> None:
    assert job_time(job(js.RUNNING), "BEGIN", 0) == (
        ", Queued time 00:00:01",
        {"SLURM_JOB_QUEUED_TIME": "00:00:01"},
    )
    assert job_time(job(js.COMPLETED), "END", 0)[0] == ", Run time 00:05:00"
    assert job_time(job(js.RUNNING), "TIME_LIMIT_80", 341.0)[0] == ", Run time 00:04:00"
    assert term_info(job(js.COMPLETED)) == ", COMPLETED, ExitCode 0"
    assert term_info(job(js.FAILED, 127)) == ", FAILED, ExitCode 127"
    assert term_info(job(js.CANCELLED, 0, 15)) == ", CANCELLED, ExitCode 0"
    assert term_info(job(js.FAILED, 0, 9)) == ", FAILED"


def event(name: str, frm: int, to: int, when: float) -> pb.JobEvent:
    return pb.JobEvent(event=name, from_state=frm, to_state=to, time=when)


def test_gpu_seconds_only_go_up_and_ends_are_counted_for_good() -> None:
    led = MetricsLedger(start=0.0)
    j = pb.Job(job_id=1, user="u", account="a", partition="p", num_gpus=2, submit_time=5.0)
    led(j, [event("submitted", js.NEW, js.PENDING, 5.0)])
    j.start_time, j.state = 10.0, js.RUNNING
    led(j, [event("started", js.PENDING, js.RUNNING, 10.0)])
    seen = []
    for now in (20.0, 30.0):
        led.accrue([j], now)
        seen.append(led.gpu_seconds[("u", "a")])
    j.state, j.end_time = js.COMPLETED, 35.0
    led(j, [event("exited", js.RUNNING, js.COMPLETED, 35.0)])
    led.accrue([], 50.0)
    seen.append(led.gpu_seconds[("u", "a")])
    assert seen == [20.0, 40.0, 50.0]  # 2 GPUs x 25 s, never back
    assert led.ended[("p", "COMPLETED")] == 1 and led.submitted["p"] == 1
    assert led.waits["p"].cumulative()[1] == ("5", 1.0)  # 5 s wait, in the le=5 bucket
    assert led.runs["p"].total == 25.0


def test_a_slow_sattach_is_cut_off_and_a_new_one_gets_recent_output() -> None:
    async def body() -> None:
        ls = Listeners()
        ls.publish(Chunk(0, data=b"early\n"))
        slow = ls.subscribe()
        assert (await slow.queue.get()).data == b"early\n"  # type: ignore[union-attr]
        for i in range(2 * LISTENER_DEPTH):
            ls.publish(Chunk(0, data=b"%d\n" % i))
        assert slow.behind and slow not in ls.attached
        late = ls.subscribe()
        assert late.queue.qsize() > 0  # the recent output again, first
        ls.publish(Chunk(0, exit=(0, 0)))
        ls.close()
        got = []
        while (item := await late.queue.get()) is not None:
            got.append(item)
        assert got[-1].exit == (0, 0)

    asyncio.run(body())


class FakeNvml:
    def __init__(self, count: int, fail: bool = False) -> None:
        self.count, self.fail, self.shut = count, fail, False

    def nvmlInit(self) -> None:
        if self.fail:
            raise RuntimeError("Driver Not Loaded")

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return i

    def nvmlDeviceGetName(self, h: Any) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        return SimpleNamespace(total=143771 * 1024 * 1024)

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.65"

    def nvmlShutdown(self) -> None:
        self.shut = True


def test_the_nvml_probe_says_what_it_found_or_why_not() -> None:
    found = probe_nvml(FakeNvml(2))
    assert (found.count, found.model, found.memory_mb, found.driver) == (
        2,
        "NVIDIA H200",
        143771,
        "580.65",
    )
    assert probe_nvml(FakeNvml(0)).why_not == "NVML sees no GPU"
    assert "Driver Not Loaded" in probe_nvml(FakeNvml(1, fail=True)).why_not


class Sent:
    def __init__(self) -> None:
        self.mails: list[Any] = []

    def send(self, mail: Any) -> None:
        self.mails.append(mail)


def events_for(jobs: dict[int, pb.Job], arrays: dict[int, set[int]]) -> tuple[Any, Sent]:
    from ctld.mailing.mail_events import MailEvents

    state = SimpleNamespace(
        jobs=jobs,
        index=SimpleNamespace(array_tasks=arrays, active_ids=set()),
        config=SimpleNamespace(mail=MailConfig(smtp_host="h"), cluster_name="lab"),
    )
    sent = Sent()
    return MailEvents(state, sent), sent  # type: ignore[arg-type]


def task(job_id: int, index: int, state: int, code: int = 0) -> pb.Job:
    j = pb.Job(job_id=job_id, array_job_id=40, array_task_id=index, state=state, exit_code=code)
    j.spec.name, j.spec.mail_type, j.user = "sweep", "BEGIN,END", "alice"
    j.submit_time, j.start_time, j.end_time = 1.0, 2.0, 5.0
    return j


def test_an_array_mails_once_as_a_whole_and_per_task_with_array_tasks() -> None:
    jobs = {40: task(40, 0, js.RUNNING), 41: task(41, 1, js.RUNNING)}
    mails, sent = events_for(jobs, {40: {40, 41}})
    for j in jobs.values():
        mails(j, [event("started", js.PENDING, js.RUNNING, 2.0)])
    assert [m.subject for m in sent.mails] == [
        "Slurm Array Task Job_id=40_0 (40) Name=sweep Began, Queued time 00:00:01"
    ]
    jobs[40].state = js.COMPLETED
    mails(jobs[40], [event("exited", js.RUNNING, js.COMPLETED, 5.0)])
    assert len(sent.mails) == 1  # task 1 still runs
    jobs[41].state, jobs[41].exit_code = js.FAILED, 2
    mails(jobs[41], [event("exited", js.RUNNING, js.FAILED, 5.0)])
    assert sent.mails[-1].subject == (
        "Slurm Array Summary Job_id=40_* (40) Name=sweep Ended, Mixed, ExitCode [0-2]"
    )
    assert sent.mails[-1].to == "alice"
    jobs[41].spec.mail_type = "END,ARRAY_TASKS"
    mails(jobs[41], [event("exited", js.RUNNING, js.FAILED, 5.0)])
    assert sent.mails[-1].subject == (
        "Slurm Array Task Job_id=40_1 (41) Name=sweep Ended, Run time 00:00:03, FAILED, ExitCode 2"
    )


def test_time_limit_warnings_once_each_and_invalid_depend() -> None:
    j = pb.Job(job_id=9, state=js.RUNNING, start_time=100.0, time_limit_s=100, user="u")
    j.spec.name, j.spec.mail_type = "long", "TIME_LIMIT_50,TIME_LIMIT_80,INVALID_DEPEND"
    p = pb.Job(job_id=10, state=js.PENDING, reason="DependencyNeverSatisfied", user="u")
    p.spec.name, p.spec.mail_type = "dep", "INVALID_DEPEND"
    mails, sent = events_for({9: j, 10: p}, {})
    mails.state.index.active_ids = {9, 10}
    for now in (140.0, 155.0, 160.0, 185.0, 190.0):
        mails.watch(now)
    assert [m.subject for m in sent.mails] == [
        "Slurm Job_id=10 Name=dep Invalid dependency",
        "Slurm Job_id=9 Name=long Reached 50% of time limit, Run time 00:00:55",
        "Slurm Job_id=9 Name=long Reached 80% of time limit, Run time 00:01:25",
    ]
