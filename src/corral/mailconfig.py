"""``[mail]``: how ctld sends the mail --mail-type asks for (Slurm's MailProg, or SMTP).

Off by default: with neither ``smtp_host`` nor ``program`` set, ctld refuses a job
that asks for mail (``--mail-type``) instead of accepting what it would never send.
The threat model of a mail program (what a user controls of its call) is in
docs/security.md, "Job mail".
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from corral.errors import ConfigError
from corral.mailaddress import address_problem, addresses
from corral.textcheck import first_control

# what the program gets before the recipients, so that it reads them as addresses and
# never as options: "--" (GNU Mailutils' mail, bsd-mailx), "-." (s-nail, whose "--"
# starts the MTA's options), "" (a Slurm MailProg script reading the recipient as $3)
OPTIONS_ENDS = ("--", "-.", "")


@dataclass(frozen=True)
class MailConfig:
    smtp_host: str = ""  # the SMTP server ("": none)
    smtp_port: int = 25
    starttls: bool = False  # STARTTLS before anything else (then the login, if any)
    username: str = ""  # SMTP login ("": none)
    password_file: str = ""  # a file (root's, mode 0600) holding its password
    sender: str = ""  # From: ("": slurm@<this host>)
    domain: str = ""  # Slurm's MailDomain: appended to a user name without "@"
    program: str = ""  # Slurm's MailProg: PROGRAM -s SUBJECT -- USER (instead of SMTP)
    options_end: str = "--"  # before the recipients in the program's call (OPTIONS_ENDS)
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
        """Who gets a job's mail: --mail-user (each address of it), else its owner, with
        MailDomain after a bare user name."""
        names = addresses(mail_user or user)
        if self.domain:
            names = [n if "@" in n else f"{n}@{self.domain}" for n in names]
        return ",".join(names)


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
        options_end=sec.get("options_end", str, d.options_end),
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
    if cfg.options_end not in OPTIONS_ENDS:
        raise ConfigError(
            f"{sec.key('options_end')}: {cfg.options_end!r} is none of "
            '"--" (GNU Mailutils, bsd-mailx), "-." (s-nail) or "" (a script reading $3)'
        )
    if cfg.domain and address_problem(f"user@{cfg.domain}"):
        raise ConfigError(f"{sec.key('domain')}: {cfg.domain!r} is not a domain name")
    if first_control(cfg.sender) is not None:
        raise ConfigError(f"{sec.key('from')}: holds a control character")
    return cfg
