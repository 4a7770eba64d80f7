"""Sending the mail jobs ask for (``--mail-type``): SMTP, or a program as Slurm's MailProg.

Mail leaves after the change it tells of is durable (it is queued by an observer of
the commit step) and never on the event loop's time: each message is sent in a thread
(SMTP) or a subprocess (the program), each try bounded by ``mail.timeout_s``, at most
SENDING_AT_ONCE at a time. Mail waits in one queue per recipient, sent in order by a
task of that recipient's own: a recipient whose server refuses it, or whose program
fails, holds back its own mail only. A try that fails is made again ``mail.retries``
times, ``retry_interval_s`` apart (doubled after each); a server's refusal for good
(a 5xx reply) is not tried again. Every mail ends counted once (``corral_mails_total``:
sent, failed, dropped, invalid) and each failure is logged; nothing the job's state
depends on waits for it, and no one mail, whatever it holds, stops the sending.

What a user gave is checked again here, whatever submit checked (a record from an
older ctld may hold anything): a recipient that is not a list of mail addresses is
never passed on (``invalid``), the subject and the program's environment are one line
each (control characters replaced). docs/security.md, "Job mail", has the threat model.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.policy
import email.utils
import os
import smtplib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from email.message import EmailMessage

import structlog

from corral.clock import Clock
from corral.mailaddress import addresses, mail_user_problem
from corral.mailconfig import MailConfig
from corral.textcheck import one_line

log = structlog.get_logger("ctld.mailing.mail")

SENDING_AT_ONCE = 4  # SMTP sessions or program runs at a time, all recipients together
_MAX_OUTPUT = 4096  # of the program's output, kept for the log
# a subject on one line, as Slurm's mail(1) sends it (folded only past RFC 5322's 998)
_POLICY = email.policy.SMTP.clone(max_line_length=998)
# what the program gets of ctld's own environment (the operator's, never a user's):
# where it finds programs, its start-up file (POSIX mailx reads $MAILRC, else
# $HOME/.mailrc), the locale its subject is encoded in and the time zone of its Date:
PROGRAM_ENV = ("PATH", "HOME", "MAILRC", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


@dataclass(frozen=True)
class Mail:
    to: str  # one address, or several separated by commas
    subject: str
    job_id: int
    env: Mapping[str, str] = field(default_factory=dict)  # MailProg's environment


class MailFailed(Exception):
    pass


class Mailer:
    def __init__(self, config: MailConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.waiting: dict[str, deque[Mail]] = {}  # per recipient, oldest first
        self.senders: dict[str, asyncio.Task[None]] = {}  # per recipient with mail waiting
        self.slots = asyncio.Semaphore(SENDING_AT_ONCE)
        self.queued = 0  # taken and not yet sent or given up (tries and waits included)
        self.sent = 0
        self.failed = 0  # given up: every try failed, refused for good, or an error
        self.dropped = 0  # never queued: the queue was full
        self.invalid = 0  # never passed on: its recipient is not a mail address
        self.attempts_failed = 0  # tries that failed, the retried ones included
        # where a test (or a custom transport) takes over the sending of one message
        self.transport: Callable[[Mail], None] = self._smtp

    def send(self, mail: Mail) -> None:
        """Queue ``mail`` behind its recipient's earlier mail (never waits)."""
        mail = replace(
            mail,
            subject=one_line(mail.subject),
            env={k: one_line(v) for k, v in mail.env.items()},
        )
        why = mail_user_problem(mail.to)
        if why:
            self.invalid += 1
            log.error(
                "mail refused: its recipient is not a mail address",
                job_id=mail.job_id,
                to=mail.to,
                why=why,
                subject=mail.subject,
            )
            return
        if self.queued >= self.config.queue_max:
            self.dropped += 1
            log.error("mail queue full: mail dropped", job_id=mail.job_id, subject=mail.subject)
            return
        self.waiting.setdefault(mail.to, deque()).append(mail)
        self.queued += 1
        if mail.to not in self.senders:
            task = asyncio.get_running_loop().create_task(self._drain(mail.to))
            self.senders[mail.to] = task

    async def _drain(self, to: str) -> None:
        """Send ``to``'s mail in order until none waits; then this task ends."""
        queue = self.waiting[to]
        try:
            while queue:
                mail = queue[0]
                try:
                    await self._deliver(mail)
                except Exception:  # a bug, or what no one foresaw: this mail only
                    self.failed += 1
                    log.exception(
                        "mail not sent: dropped", job_id=mail.job_id, to=to, subject=mail.subject
                    )
                finally:
                    queue.popleft()
                    self.queued -= 1
        finally:
            del self.waiting[to], self.senders[to]

    async def _deliver(self, mail: Mail) -> None:
        wait = self.config.retry_interval_s
        for attempt in range(self.config.retries + 1):
            try:
                async with self.slots:
                    await self._try(mail)
            except (OSError, smtplib.SMTPException, MailFailed, TimeoutError) as exc:
                self.attempts_failed += 1
                last = _for_good(exc) or attempt == self.config.retries
                log.warning(
                    "mail not sent" + (": dropped" if last else ": will retry"),
                    job_id=mail.job_id,
                    to=mail.to,
                    subject=mail.subject,
                    attempt=attempt + 1,
                    error=_said(exc),
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

    async def _try(self, mail: Mail) -> None:
        if self.config.program:
            await self._program(mail)
        else:
            await asyncio.wait_for(
                asyncio.to_thread(self.transport, mail), self.config.timeout_s + 5
            )

    # ------------------------------------------------------------ transports

    def _smtp(self, mail: Mail) -> None:
        cfg = self.config
        sender = cfg.from_address()
        envelope_from = email.utils.parseaddr(sender)[1] or sender
        to = addresses(mail.to)
        msg = EmailMessage(policy=_POLICY)
        msg["From"] = sender
        msg["To"] = ", ".join(to)
        msg["Subject"] = mail.subject
        msg["Date"] = email.utils.formatdate(localtime=True)
        domain = envelope_from.rpartition("@")[2] or None
        msg["Message-ID"] = email.utils.make_msgid(f"corral.job{mail.job_id}", domain=domain)
        msg.set_content("")  # Slurm's mail says everything in its subject
        with smtplib.SMTP(cfg.smtp_host, cfg.smtp_port, timeout=cfg.timeout_s) as smtp:
            if cfg.starttls:
                smtp.starttls()
            if cfg.username:
                smtp.login(cfg.username, _password(cfg.password_file))
            refused = smtp.send_message(msg, from_addr=envelope_from, to_addrs=to)
        for address, (code, said) in refused.items():  # the others got it: not tried again
            log.warning(
                "mail not delivered to one recipient",
                job_id=mail.job_id,
                to=address,
                error=f"{code} {said.decode(errors='replace')}",
            )

    def program_argv(self, mail: Mail) -> list[str]:
        """MailProg's call: PROGRAM -s SUBJECT -- ADDRESS..., each address an argument
        after the end of the options (``mail.options_end``); without one, Slurm's own
        call (PROGRAM -s SUBJECT USER, the list as one argument)."""
        cfg = self.config
        if not cfg.options_end:
            return [cfg.program, "-s", mail.subject, mail.to]
        return [cfg.program, "-s", mail.subject, cfg.options_end, *addresses(mail.to)]

    async def _program(self, mail: Mail) -> None:
        """The program, with the job's variables in its environment."""
        own = {k: os.environ[k] for k in PROGRAM_ENV if k in os.environ}
        env = {"PATH": "/usr/bin:/bin", **own, **mail.env}
        proc = await asyncio.create_subprocess_exec(
            *self.program_argv(mail),
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


def _for_good(exc: BaseException) -> bool:
    """A refusal the server gave for good (a 5xx reply): another try gets the same."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return all(500 <= code < 600 for code, _ in exc.recipients.values())
    return isinstance(exc, smtplib.SMTPResponseException) and 500 <= exc.smtp_code < 600


def _said(exc: BaseException) -> str:
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return "; ".join(
            f"{address}: {code} {said.decode(errors='replace')}"
            for address, (code, said) in exc.recipients.items()
        )
    return str(exc) or type(exc).__name__


def _password(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.readline().rstrip("\n")
