"""``[mail]``: how ctld sends the mail --mail-type asks for (Slurm's MailProg, or SMTP).

Off by default: with neither ``smtp_host`` nor ``program`` set, ctld refuses a job
that asks for mail (``--mail-type``) instead of accepting what it would never send.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from corral.errors import ConfigError


@dataclass(frozen=True)
class MailConfig:
    smtp_host: str = ""  # the SMTP server ("": none)
    smtp_port: int = 25
    starttls: bool = False  # STARTTLS before anything else (then the login, if any)
    username: str = ""  # SMTP login ("": none)
    password_file: str = ""  # a file (root's, mode 0600) holding its password
    sender: str = ""  # From: ("": slurm@<this host>)
    domain: str = ""  # Slurm's MailDomain: appended to a user name without "@"
    program: str = ""  # Slurm's MailProg: PROGRAM -s SUBJECT USER (instead of SMTP)
    timeout_s: float = 10.0  # one attempt: connect, send, or the program's run
    retries: int = 3  # attempts after the first, when the server or program fails
    retry_interval_s: float = 30.0  # before the first retry; doubled after each
    queue_max: int = 10000  # mails waiting; past it new ones are dropped (and logged)

    @property
    def enabled(self) -> bool:
        return bool(self.smtp_host or self.program)

    def from_address(self) -> str:
        return self.sender or f"slurm@{socket.getfqdn()}"

    def recipient(self, mail_user: str, user: str) -> str:
        """Who gets a job's mail: --mail-user, else its owner (with MailDomain)."""
        to = mail_user or user
        if "@" not in to and self.domain:
            to = f"{to}@{self.domain}"
        return to


def parse_mail(sec: Any) -> MailConfig:
    """``[mail]`` from a config ``Section`` (corral/config/section.py)."""
    d = MailConfig()
    cfg = MailConfig(
        smtp_host=sec.get("smtp_host", str, d.smtp_host),
        smtp_port=sec.port("smtp_port", d.smtp_port),
        starttls=sec.get("starttls", bool, d.starttls),
        username=sec.get("username", str, d.username),
        password_file=sec.get("password_file", str, d.password_file),
        sender=sec.get("from", str, d.sender),
        domain=sec.get("domain", str, d.domain),
        program=sec.get("program", str, d.program),
        timeout_s=sec.positive("timeout_s", d.timeout_s, allow_zero=False),
        retries=sec.positive("retries", d.retries),
        retry_interval_s=sec.positive("retry_interval_s", d.retry_interval_s),
        queue_max=sec.positive("queue_max", d.queue_max, allow_zero=False),
    )
    sec.done()
    if cfg.smtp_host and cfg.program:
        raise ConfigError(f"{sec.key('program')}: set smtp_host or program, not both")
    if cfg.retries > 20:
        raise ConfigError(f"{sec.key('retries')}: at most 20 (a mail is dropped after them)")
    if cfg.username and not cfg.password_file:
        raise ConfigError(f"{sec.key('password_file')}: needed with mail.username")
    return cfg
