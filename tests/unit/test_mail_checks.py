"""What a user's value may be before it reaches mail (issue 34): the address check
(--mail-user), one line of header text (job names), the mail program's argv, the
[mail] keys that shape them, and a sender that outlives any one bad mail."""

from __future__ import annotations

import asyncio
import string
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.clock import SystemClock
from corral.config.section import Section
from corral.errors import ConfigError, InvalidOption
from corral.mailaddress import addresses, check_mail_user, mail_user_problem
from corral.mailconfig import MailConfig, parse_mail
from corral.textcheck import check_one_line, first_control, is_control, one_line
from ctld.mailing.mail import Mail, Mailer

pytestmark = pytest.mark.timeout(60)

# what would make a mail program, a shell or an MTA read more than an address
HOSTILE = set(" \t\r\n\x00|/\\!'\"`$<>()[];&~#*?{}:,")


@given(st.text(max_size=80))
def test_an_accepted_mail_user_is_addresses_and_nothing_a_program_reads_otherwise(
    value: str,
) -> None:
    if mail_user_problem(value):
        with pytest.raises(InvalidOption, match="Invalid --mail-user"):
            check_mail_user(value)
        return
    assert check_mail_user(value) == value
    for address in addresses(value):
        assert address and address[0] not in "-+.=%"
        assert not set(address) & HOSTILE
        assert first_control(address) is None
        assert address.count("@") <= 1


_LOCAL = st.text(string.ascii_letters + string.digits + "_", min_size=1, max_size=12)
_LABEL = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=10)


@given(_LOCAL, st.lists(_LOCAL, max_size=2), st.lists(_LABEL, min_size=1, max_size=3))
def test_every_ordinary_address_is_accepted(first: str, rest: list[str], labels: list[str]) -> None:
    local = ".".join([first, *rest])
    assert check_mail_user(local) == local  # a user name: mail.domain is appended
    address = f"{local}+tag@{'.'.join(labels)}"
    assert check_mail_user(address) == address
    assert check_mail_user(f"{address},{local}") == f"{address},{local}"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("--exec=!touch /tmp/x #@x", "starts with '-' (the mail program would read an option)"),
        ("-X!id", "starts with '-'"),
        ("|id>/tmp/x", "holds '|'"),
        ("/etc/cron.d/x", "holds '/'"),
        ("+inbox", "starts with '+'"),
        ("alice@lab.example\r\nBcc: eve@x", "holds a control character (U+000D)"),
        ("alice@lab.example\nBcc: eve@x", "holds a control character (U+000A)"),
        ("alice bob", "holds a space"),
        ("alice@-lab.example", "'-lab.example' after its @, which is not a domain name"),
        ("alice..b@lab.example", "misplaced '.'"),
        ("alice@lab.example,|cmd", "'|cmd' holds '|'"),
        ("a," * 16 + "a", "more than 16 addresses"),
    ],
)
def test_a_hostile_mail_user_is_refused_naming_what_is_wrong(value: str, said: str) -> None:
    with pytest.raises(InvalidOption) as caught:
        check_mail_user(value)
    message = caught.value.message
    assert said in message and message.startswith(f"Invalid --mail-user {value!r}: ")
    assert "\n" not in message and "\r" not in message  # the value shown escaped


@given(st.text(max_size=60))
def test_one_line_leaves_no_control_character_and_keeps_the_rest(text: str) -> None:
    line = one_line(text)
    assert first_control(line) is None and len(line) == len(text)
    assert all(a == b for a, b in zip(text, line, strict=True) if not is_control(a))
    assert len(line.splitlines()) <= 1  # what str.splitlines breaks at, one_line removes


def test_a_job_name_with_a_control_character_is_refused_naming_it() -> None:
    assert check_one_line("train ÿ ünï", "job name") == "train ÿ ünï"
    for char in ("\r", "\n", "\t", "\x1b", "\x7f", "\x85", "\u2028"):
        with pytest.raises(InvalidOption, match=r"Invalid job name .*a control character \(U\+"):
            check_one_line(f"a{char}b", "job name")


def test_the_recipient_is_each_address_with_the_domain_after_a_user_name() -> None:
    cfg = MailConfig(smtp_host="h", domain="lab.example")
    assert cfg.recipient("", "alice") == "alice@lab.example"
    assert cfg.recipient("bob,carol@else.org", "alice") == "bob@lab.example,carol@else.org"
    assert MailConfig(smtp_host="h").recipient("", "alice") == "alice"


def section(**keys: Any) -> Section:
    return Section(keys, "mail")


def test_the_mail_keys_that_shape_the_call_are_checked() -> None:
    assert parse_mail(section(program="/usr/bin/s-nail", options_end="-.")).options_end == "-."
    assert parse_mail(section(program="/x", options_end="")).options_end == ""
    with pytest.raises(ConfigError, match=r"mail.options_end: '-e' is none of"):
        parse_mail(section(program="/x", options_end="-e"))
    with pytest.raises(ConfigError, match=r"mail.domain: 'lab example' is not a domain"):
        parse_mail(section(smtp_host="h", domain="lab example"))
    with pytest.raises(ConfigError, match=r"mail.from: holds a control character"):
        parse_mail(section(smtp_host="h", **{"from": "a@b\r\nBcc: c@d"}))


def test_the_program_gets_the_recipients_after_the_end_of_its_options() -> None:
    mail = Mail(to="alice@lab.example,bob", subject="Slurm Job_id=1 Name=x Began", job_id=1)

    def argv(end: str) -> list[str]:
        return Mailer(
            MailConfig(program="/usr/bin/mail", options_end=end), SystemClock()
        ).program_argv(mail)

    head = ["/usr/bin/mail", "-s", mail.subject]
    assert argv("--") == [*head, "--", "alice@lab.example", "bob"]
    assert argv("-.") == [*head, "-.", "alice@lab.example", "bob"]
    assert argv("") == [*head, "alice@lab.example,bob"]  # Slurm's own call: $3


def test_no_one_mail_stops_the_sending_and_each_ends_counted() -> None:
    async def body() -> Mailer:
        config = MailConfig(smtp_host="h", retries=1, retry_interval_s=0.01)
        mailer = Mailer(config, SystemClock())
        sent: list[str] = []

        def transport(mail: Mail) -> None:
            if "boom" in mail.subject:
                raise RuntimeError("a bug of the transport's")  # no error it expects
            sent.append(mail.subject)

        mailer.transport = transport
        mailer.send(Mail(to="alice", subject="boom", job_id=1))
        mailer.send(Mail(to="alice", subject="after\r\nBcc: eve", job_id=2))
        mailer.send(Mail(to="|touch /tmp/x", subject="never", job_id=3))
        while mailer.senders:
            await asyncio.gather(*mailer.senders.values())
        assert sent == ["after  Bcc: eve"]
        return mailer

    mailer = asyncio.run(body())
    assert (mailer.sent, mailer.failed, mailer.invalid, mailer.queued) == (1, 1, 1, 0)
    assert not mailer.waiting
