"""Job mail under attack by a second real user (issue 34; docs/security.md, "Job mail").

Real ctld and noded, real users made with useradd (tests/integration/realusers.py), a
real SMTP server (aiosmtpd) and the real mail programs of the OS packages: GNU
Mailutils' ``mail`` and s-nail, each told by its start-up file ($MAILRC, which ctld
passes on from its own environment) to send through that server. A value a user gives
is refused at submit (by ctld, whatever the command checked) and again where the mail
is sent, for a record stored before the check: the injected command never runs, no
header is forged, a refused recipient holds no one else's mail, and legitimate mail
still goes out.
"""

from __future__ import annotations

import os
import pathlib
import pwd
import threading
import time
from collections.abc import Iterator
from email import message_from_bytes, policy
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from prometheus_client.parser import text_string_to_metric_families

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory, free_port
from tests.conftest import wait_for
from tests.integration.realusers import Users, can_make_users, command, raw, submit_as
from tests.integration.stored import rewrite_stored

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not can_make_users(), reason="needs root and useradd"),
]

DOMAIN = "lab.example"


class Server:
    """An SMTP server that refuses some recipients (``replies``: address -> reply) and
    keeps what it received, and every RCPT it was asked, with its time."""

    def __init__(self, replies: dict[str, str] | None = None) -> None:
        self.replies = replies or {}
        self.mails: list[tuple[list[str], Any]] = []
        self.asked: list[tuple[str, float]] = []
        self.lock = threading.Lock()

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        with self.lock:
            self.asked.append((address, time.monotonic()))
        reply = self.replies.get(address)
        if reply:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.content, policy=policy.default)
        with self.lock:
            self.mails.append((list(envelope.rcpt_tos), message))
        return "250 OK"

    def received(self) -> list[tuple[list[str], Any]]:
        with self.lock:
            return list(self.mails)

    def to(self, address: str) -> list[Any]:
        return [m for rcpt, m in self.received() if address in rcpt]

    def times_asked(self, address: str) -> int:
        with self.lock:
            return sum(1 for a, _ in self.asked if a == address)


@pytest.fixture
def smtp() -> Iterator[tuple[Server, int]]:
    server = Server()
    port = free_port()
    running = Controller(server, hostname="127.0.0.1", port=port)
    running.start()
    try:
        yield server, port
    finally:
        running.stop()


def mail_config(**keys: Any) -> str:
    def toml(v: Any) -> str:
        return '"' + v + '"' if isinstance(v, str) else str(v)

    return "\n[mail]\n" + "".join(f"{k} = {toml(v)}\n" for k, v in keys.items())


def address(pw: pwd.struct_passwd) -> str:
    return f"{pw.pw_name}@{DOMAIN}"


def sbatch(c: LocalCluster, users: Users, pw: pwd.struct_passwd, *args: str) -> tuple[int, str]:
    code, out, err = command(c, pw, "sbatch", "--parsable", *args, cwd=users.home(pw))
    return code, out + err


def submit_raw(c: LocalCluster, users: Users, pw: pwd.struct_passwd, **spec: Any) -> dict[str, Any]:
    """A SubmitJob made by hand as ``pw``: what ctld says, whatever a command checks."""
    full = {"script": "#!/bin/sh\ntrue\n", "workDir": str(users.home(pw)), **spec}
    return raw(c, pw, "SubmitJob", {"spec": full})


def mails_counted(c: LocalCluster) -> dict[str, float]:
    """corral_mails_total by outcome, the failed tries and the queue, from /metrics."""
    text = c.scrape()
    counted: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "corral_mails_total":
                counted[s.labels["outcome"]] = s.value
            elif s.name in ("corral_mail_attempts_failed_total", "corral_mail_queue"):
                counted[s.name] = s.value
    return counted


def ctld_log(c: LocalCluster) -> str:
    return (c.state_dir / "log" / "ctld.log").read_text()


# ------------------------------------------------------------ a real mail program

MAIL_PROGRAMS = {
    # program, the end of its options, its start-up file pointed at the test's server
    "mailutils": ("/usr/bin/mail.mailutils", "--", "set sendmail=smtp://127.0.0.1:{port}\n"),
    "s-nail": ("/usr/bin/s-nail", "-.", "set mta=smtp://127.0.0.1:{port}\n"),
}


def installed(program: str) -> str:
    if os.access(program, os.X_OK):
        return program
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {program} is missing: .ci/run installs mailutils and s-nail")
    pytest.skip(f"{program} is not installed (Debian: mailutils, s-nail)")


@pytest.mark.parametrize("name", sorted(MAIL_PROGRAMS))
def test_a_real_mail_program_never_takes_a_users_value_for_an_option_a_pipe_or_a_file(
    name: str,
    users: Users,
    cluster_factory: ClusterFactory,
    smtp: tuple[Server, int],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    program, options_end, rc = MAIL_PROGRAMS[name]
    installed(program)
    server, port = smtp
    mailrc = tmp_path / "mailrc"
    mailrc.write_text(rc.format(port=port))
    monkeypatch.setenv("MAILRC", str(mailrc))  # ctld's environment, passed to the program
    c = cluster_factory(
        nodes=1,
        gpus_per_node=0,
        extra_config=mail_config(
            program=program, options_end=options_end, domain=DOMAIN, retries=0, timeout_s=20.0
        ),
    )
    proof = tmp_path / "ran"  # what each injected command would make, as ctld's root
    proof.mkdir(mode=0o777)
    hostile = [
        f"--exec=!touch {proof}/exec #@x",  # GNU mail's option: runs a command
        f"-X!touch {proof}/x",  # s-nail's option: runs a command
        f"|touch {proof}/pipe",  # a pipe recipient (GNU mail takes it even after --)
        f"{proof}/file",  # a file recipient: root appends the mail to any file
        f"{address(users.alice)}\nBcc: {address(users.bob)}",
    ]
    alice = users.alice
    for value in hostile:
        code, said = sbatch(
            c, users, alice, "--mail-type=END", f"--mail-user={value}", "--wrap=true"
        )
        # refused by sbatch itself (255: a bad option, as Slurm's), then by ctld, for a
        # request no command checked
        assert code == 255 and "Invalid --mail-user" in said, (value, said)
        reply = submit_raw(c, users, alice, mailType="END", mailUser=value)
        assert reply.get("error") == "InvalidOption", (value, reply)
        assert "Invalid --mail-user" in reply["message"]
    held = submit_as(c, users, alice, "-H", "--mail-type=BEGIN", "--wrap=true")
    reply = raw(
        c,
        alice,
        "UpdateJob",
        {"jobIds": [str(held)], "action": "JOB_UPDATE_FIELDS", "mailUser": hostile[0]},
    )
    outcome = reply["ok"]["outcomes"][0]
    assert not outcome.get("ok") and "Invalid --mail-user" in outcome["message"], reply

    # a record stored before the check: ctld refuses that mail where it is sent
    stored = [held, submit_as(c, users, alice, "-H", "--mail-type=BEGIN", "--wrap=true")]
    c.stop_process("ctld")
    for job_id, value in zip(stored, (hostile[0], hostile[2]), strict=True):
        rewrite_stored(c, job_id, lambda spec, v=value: setattr(spec, "mail_user", v))
    c.start_ctld()
    for job_id in stored:
        assert command(c, alice, "scontrol", "release", str(job_id))[0] == 0
        c.wait_state(job_id, "RUNNING", "COMPLETED")
    wait_for(lambda: mails_counted(c).get("invalid") == 2, 30, "both mails refused", interval=0.2)
    assert ctld_log(c).count("mail refused: its recipient is not a mail address") == 2

    # legitimate mail still goes out through the same program
    bob = users.bob
    job_id = submit_as(c, users, bob, "-J", "legit", "--mail-type=END", "--wrap=true")
    c.wait_state(job_id, "COMPLETED")
    got = wait_for(lambda: server.to(address(bob)), 30, f"{name}'s mail to bob")
    assert str(got[0]["Subject"]).startswith(f"Slurm Job_id={job_id} Name=legit Ended")
    wait_for(lambda: mails_counted(c).get("sent") == 1, 10, "the mail counted", interval=0.2)
    assert sorted(p.name for p in proof.iterdir()) == []  # no injected command ran
    assert [rcpt for rcpt, _ in server.received()] == [[address(bob)]]


# ------------------------------------------------------------ SMTP: one queue per recipient


def test_a_refused_recipient_holds_no_one_elses_mail_and_every_failure_is_counted(
    users: Users, cluster_factory: ClusterFactory, smtp: tuple[Server, int]
) -> None:
    server, port = smtp
    bob, alice = users.bob, users.alice
    gone = f"gone@{DOMAIN}"
    server.replies = {
        address(bob): "451 4.2.1 mailbox busy, try again later",  # tried again, 30 s on
        gone: "550 5.1.1 no such user",  # refused for good: never tried again
    }
    c = cluster_factory(
        nodes=1,
        gpus_per_node=0,
        extra_config=mail_config(
            smtp_host="127.0.0.1", smtp_port=port, domain=DOMAIN, retries=3, retry_interval_s=30.0
        ),
    )
    first = submit_as(c, users, bob, "--mail-type=END", "--wrap=true")
    second = submit_as(c, users, bob, "--mail-type=END", f"--mail-user={gone}", "--wrap=true")
    for job_id in (first, second):
        c.wait_state(job_id, "COMPLETED")
    wait_for(
        lambda: server.times_asked(address(bob)) and server.times_asked(gone), 30, "both refused"
    )
    job_id = submit_as(c, users, alice, "--mail-type=END", "--wrap=true")
    c.wait_state(job_id, "COMPLETED")
    # long before bob's first retry (30 s): his refused mail holds nobody else's
    got = wait_for(lambda: server.to(address(alice)), 15, "alice's mail")
    message = got[0]
    assert str(message["Subject"]).startswith(f"Slurm Job_id={job_id} Name=wrap Ended")
    assert message["Date"] and message["Message-ID"]
    counted = wait_for(
        lambda: (n := mails_counted(c)).get("sent") == 1 and n, 10, "the count", interval=0.2
    )
    assert counted["failed"] == 1  # gone@: refused for good
    assert counted["corral_mail_queue"] == 1  # bob's, waiting for its retry
    assert counted["corral_mail_attempts_failed_total"] == 2
    assert server.times_asked(gone) == 1
    text = ctld_log(c)
    assert "mail not sent: dropped" in text and "550 5.1.1 no such user" in text
    assert "mail not sent: will retry" in text and "451 4.2.1" in text


# ------------------------------------------------------------ CR/LF: no header of a user's


def test_cr_lf_in_a_job_name_or_recipient_neither_stops_the_mail_nor_forges_a_header(
    users: Users, cluster_factory: ClusterFactory, smtp: tuple[Server, int]
) -> None:
    server, port = smtp
    alice, bob = users.alice, users.bob
    c = cluster_factory(
        nodes=1,
        gpus_per_node=0,
        extra_config=mail_config(smtp_host="127.0.0.1", smtp_port=port, domain=DOMAIN),
    )
    forged = f"x\r\nBcc: {address(bob)}"
    code, said = sbatch(c, users, alice, "-J", forged, "--mail-type=END", "--wrap=true")
    assert code == 255 and "Invalid job name" in said and "U+000D" in said, said
    for spec in ({"name": forged}, {"name": "x", "mailType": "END", "mailUser": forged}):
        reply = submit_raw(c, users, alice, **spec)
        assert reply.get("error") == "InvalidOption", reply
    job_id = submit_as(c, users, alice, "-H", "-J", "fine", "--mail-type=END", "--wrap=true")
    for key in ("name", "mailUser"):
        reply = raw(
            c,
            alice,
            "UpdateJob",
            {"jobIds": [str(job_id)], "action": "JOB_UPDATE_FIELDS", key: forged},
        )
        assert not reply["ok"]["outcomes"][0].get("ok"), reply
    for key, said in (("JobName", "Invalid job name"), ("MailUser", "Invalid --mail-user")):
        code, _, err = command(c, alice, "scontrol", "update", f"JobId={job_id}", f"{key}={forged}")
        assert code != 0 and said in err, err
    update = ("scontrol", "update", f"JobId={job_id}", f"MailUser={address(alice)}", "MailType=END")
    assert command(c, alice, *update)[0] == 0

    # records stored before the checks: a name with CR/LF, a recipient with CR/LF
    by_name = job_id
    by_user = submit_as(c, users, alice, "-H", "--mail-type=END", "--wrap=true")
    c.stop_process("ctld")
    rewrite_stored(c, by_name, lambda spec: setattr(spec, "name", f"train{forged}"))
    rewrite_stored(c, by_user, lambda spec: setattr(spec, "mail_user", f"{address(alice)}{forged}"))
    c.start_ctld()
    for stored in (by_user, by_name):
        assert command(c, alice, "scontrol", "release", str(stored))[0] == 0
        c.wait_state(stored, "COMPLETED")
    rcpt, message = wait_for(
        lambda: next(((r, m) for r, m in server.received() if "Name=train" in m["Subject"]), None),
        30,
        "the mail of the forged name",
    )
    assert rcpt == [address(alice)]  # bob in no envelope
    assert message["Bcc"] is None and address(bob) not in str(message["To"])
    subject = str(message["Subject"])
    assert subject.startswith(f"Slurm Job_id={by_name} Name=trainx  Bcc: ") and "\n" not in subject
    wait_for(
        lambda: mails_counted(c).get("invalid") == 1,
        30,
        "the forged recipient refused",
        interval=0.2,
    )
    # the sending goes on: a later mail leaves as ever
    later = submit_as(c, users, alice, "-J", "later", "--mail-type=END", "--wrap=true")
    c.wait_state(later, "COMPLETED")
    wait_for(
        lambda: any("Name=later" in str(m["Subject"]) for m in server.to(address(alice))),
        30,
        "the later mail",
    )
    assert all(address(bob) not in rcpt for rcpt, _ in server.received())
