"""Job mail end to end (issue 26): real ctld and nodeds, a real SMTP server (aiosmtpd,
on a free port of this host), Slurm's subjects; a MailProg called as Slurm calls it
(the recipient after "--"); a mail server that is down costs retries and a log line,
never the job's state. Hostile values: test_mail_security.py."""

from __future__ import annotations

import os
import pathlib
import stat
import threading
from collections.abc import Iterator
from email import message_from_bytes, policy
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from corral.testing.cluster import ClusterFactory, free_port
from corral.testing.harness import wait_for
from tests.conftest import Commands

pytestmark = pytest.mark.timeout(180)


class Inbox:
    """What the SMTP server received: (envelope recipients, message)."""

    def __init__(self) -> None:
        self.mails: list[tuple[list[str], Any]] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.mails.append(
                (
                    list(envelope.rcpt_tos),
                    message_from_bytes(envelope.content, policy=policy.default),
                )
            )
        return "250 OK"

    def subjects(self) -> list[str]:
        with self.lock:
            return [str(m["Subject"]) for _, m in self.mails]


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    port = free_port()
    server = Controller(inbox, hostname="127.0.0.1", port=port)
    server.start()
    try:
        yield inbox, port
    finally:
        server.stop()


def mail_config(**keys: Any) -> str:
    lines = [f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}" for k, v in keys.items()]
    return "\n[mail]\n" + "\n".join(lines).replace("'", '"') + "\n"


def test_mail_reaches_a_real_smtp_server_with_slurms_subjects(
    tmp_path: pathlib.Path, cluster_factory: ClusterFactory, smtp: tuple[Inbox, int]
) -> None:
    inbox, port = smtp
    c = cluster_factory(
        nodes=1, gpus_per_node=0, extra_config=mail_config(smtp_host="127.0.0.1", smtp_port=port)
    )
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    ok = cmd(
        "sbatch",
        "--parsable",
        "-J",
        "train",
        "--mail-type=ALL",
        "--mail-user=alice@lab.example",
        "--wrap",
        "sleep 1",
    ).stdout.strip()
    bad = cmd("sbatch", "--parsable", "--mail-type=FAIL", "--wrap", "exit 3").stdout.strip()
    quiet = cmd("sbatch", "--parsable", "--mail-type=END,NONE", "--wrap", "true").stdout.strip()
    for job in (ok, bad, quiet):
        c.wait_state(job, "COMPLETED", "FAILED")
    wait_for(lambda: len(inbox.subjects()) >= 3, 30, "three mails")
    subjects = sorted(inbox.subjects())
    began = next(s for s in subjects if "Began" in s)
    assert began.startswith(f"Slurm Job_id={ok} Name=train Began, Queued time 00:00:0"), subjects
    ended = next(s for s in subjects if "Ended" in s)
    assert ended.startswith(f"Slurm Job_id={ok} Name=train Ended, Run time 00:00:0"), subjects
    assert ended.endswith(", COMPLETED, ExitCode 0")
    failed = next(s for s in subjects if "Failed" in s)
    assert failed.startswith(f"Slurm Job_id={bad} Name=wrap Failed, Run time 00:00:0")
    assert failed.endswith(", FAILED, ExitCode 3")
    assert len(subjects) == 3  # NONE wins: the third job sent nothing
    to = {s: rcpt for rcpt, m in inbox.mails for s in [str(m["Subject"])]}
    assert to[began] == ["alice@lab.example"]
    assert to[failed] == ["root"]  # no --mail-user: the job's owner


def test_a_mail_prog_is_called_as_slurm_calls_it_the_recipient_after_the_options(
    tmp_path: pathlib.Path, cluster_factory: ClusterFactory
) -> None:
    log = tmp_path / "mails"
    prog = tmp_path / "mailprog"
    prog.write_text(
        "#!/bin/sh\n"
        f'printf "%s|%s|%s|%s|%s|%s|%s\\n" "$1" "$2" "$3" "$4" "$SLURM_JOB_ID" '
        f'"$SLURM_JOB_MAIL_TYPE" "$SLURM_JOB_STATE" >> {log}\n'
    )
    prog.chmod(prog.stat().st_mode | stat.S_IEXEC)
    c = cluster_factory(nodes=1, gpus_per_node=0, extra_config=mail_config(program=str(prog)))
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    job = cmd("sbatch", "--parsable", "--mail-type=BEGIN,END", "--wrap", "true").stdout.strip()
    c.wait_state(job, "COMPLETED")
    wait_for(lambda: log.exists() and len(log.read_text().splitlines()) == 2, 30, "two calls")
    lines = sorted(log.read_text().splitlines())
    first, second = (line.split("|") for line in lines)
    # Slurm's PROGRAM -s SUBJECT USER, with "--" (mail.options_end) before the user
    assert first[0] == "-s" and first[2:4] == ["--", "root"] and first[4] == job
    assert {first[5], second[5]} == {"Began", "Ended"}
    assert any(x[1].endswith(", COMPLETED, ExitCode 0") for x in (first, second))


def test_a_mail_server_that_is_down_never_costs_the_job_its_state(
    tmp_path: pathlib.Path, cluster_factory: ClusterFactory
) -> None:
    port = free_port()  # nothing listens there
    c = cluster_factory(
        nodes=1,
        gpus_per_node=0,
        extra_config=mail_config(
            smtp_host="127.0.0.1", smtp_port=port, retries=2, retry_interval_s=0.2, timeout_s=2.0
        ),
    )
    work = tmp_path / "work"
    work.mkdir()
    cmd = Commands(c, work)
    job = cmd("sbatch", "--parsable", "--mail-type=END", "--wrap", "true").stdout.strip()
    c.wait_state(job, "COMPLETED")
    ctld_log = c.state_dir / "log" / "ctld.log"
    wait_for(lambda: "mail not sent: dropped" in ctld_log.read_text(), 30, "the mail given up")
    text = ctld_log.read_text()
    assert text.count("mail not sent: will retry") == 2, text[-2000:]
    acct = cmd("sacct", "-j", job, "-X", "-n", "-P", "-o", "State").stdout.strip()
    assert acct == "COMPLETED"
    assert os.path.exists(c.state_dir / "corral.db")
