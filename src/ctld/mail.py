"""Sending the mail jobs ask for (``--mail-type``): SMTP, or a program as Slurm's MailProg.

Mail leaves after the change it tells of is durable (it is queued by an observer of
the commit step) and never on the event loop's time: the queue is drained by one task
that sends each message in a thread (SMTP) or a subprocess (the program), each try
bounded by ``mail.timeout_s``. A server or program that fails is tried again
``mail.retries`` times, ``retry_interval_s`` apart (doubled after each); then the mail
is dropped and logged. Nothing the job's state depends on waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.policy
import os
import smtplib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage

import structlog

from corral.clock import Clock
from corral.mailconfig import MailConfig

log = structlog.get_logger("ctld.mail")

_MAX_OUTPUT = 4096  # of the program's output, kept for the log
# a subject on one line, as Slurm's mail(1) sends it (folded only past RFC 5322's 998)
_POLICY = email.policy.SMTP.clone(max_line_length=998)


@dataclass(frozen=True)
class Mail:
    to: str
    subject: str
    job_id: int
    env: Mapping[str, str] = field(default_factory=dict)  # MailProg's environment


class MailFailed(Exception):
    pass


class Mailer:
    def __init__(self, config: MailConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.queue: asyncio.Queue[Mail] = asyncio.Queue()
        self.sent = 0
        self.failed = 0  # dropped after every retry failed
        self.dropped = 0  # never queued: the queue was full
        self.attempts_failed = 0
        # where a test (or a custom transport) takes over the sending of one message
        self.transport: Callable[[Mail], None] = self._smtp
        self._worker: asyncio.Task[None] | None = None

    def send(self, mail: Mail) -> None:
        """Queue ``mail`` (never waits); the worker starts with the first one."""
        if self.queue.qsize() >= self.config.queue_max:
            self.dropped += 1
            log.error("mail queue full: mail dropped", job_id=mail.job_id, subject=mail.subject)
            return
        self.queue.put_nowait(mail)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self.run())

    async def run(self) -> None:
        while True:
            mail = await self.queue.get()
            await self._deliver(mail)

    async def _deliver(self, mail: Mail) -> None:
        wait = self.config.retry_interval_s
        for attempt in range(self.config.retries + 1):
            try:
                if self.config.program:
                    await self._program(mail)
                else:
                    await asyncio.wait_for(
                        asyncio.to_thread(self.transport, mail), self.config.timeout_s + 5
                    )
            except (OSError, smtplib.SMTPException, MailFailed, TimeoutError) as exc:
                self.attempts_failed += 1
                last = attempt == self.config.retries
                log.warning(
                    "mail not sent" + (": dropped" if last else ": will retry"),
                    job_id=mail.job_id,
                    to=mail.to,
                    subject=mail.subject,
                    attempt=attempt + 1,
                    error=str(exc) or type(exc).__name__,
                )
                if last:
                    self.failed += 1
                    return
                await self.clock.sleep(wait)
                wait *= 2
                continue
            self.sent += 1
            log.info("mail sent", job_id=mail.job_id, to=mail.to, subject=mail.subject)
            return

    # ------------------------------------------------------------ transports

    def _smtp(self, mail: Mail) -> None:
        cfg = self.config
        msg = EmailMessage(policy=_POLICY)
        msg["From"] = cfg.from_address()
        msg["To"] = mail.to
        msg["Subject"] = mail.subject
        msg.set_content("")  # Slurm's mail says everything in its subject
        with smtplib.SMTP(cfg.smtp_host, cfg.smtp_port, timeout=cfg.timeout_s) as smtp:
            if cfg.starttls:
                smtp.starttls()
            if cfg.username:
                smtp.login(cfg.username, _password(cfg.password_file))
            smtp.send_message(msg)

    async def _program(self, mail: Mail) -> None:
        """MailProg's call: PROGRAM -s SUBJECT USER, the job's variables in its environment."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **mail.env}
        proc = await asyncio.create_subprocess_exec(
            self.config.program,
            "-s",
            mail.subject,
            mail.to,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), self.config.timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise MailFailed(
                f"{self.config.program} ran past {self.config.timeout_s:g} s"
            ) from None
        if proc.returncode:
            said = out[:_MAX_OUTPUT].decode(errors="replace").strip()
            raise MailFailed(f"{self.config.program} exited {proc.returncode}: {said}")


def _password(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.readline().rstrip("\n")
