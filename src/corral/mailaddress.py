"""What ``--mail-user`` may be: mail addresses, never an option, a pipe or a path.

The value reaches the argv of the mail program (as root's child: GNU Mailutils' mail
runs ``--exec=CMD``, and takes ``|CMD`` for a pipe and ``/path`` for a file to append
to even after ``--``), an SMTP envelope and a ``To:`` header. So an address is held to
a strict shape, checked at submit (sbatch, srun, salloc and ``scontrol update
MailUser=``, in ctld; the commands run the same check first) and again where the mail
is sent, since a record stored before this check may hold anything:

    local[@domain]    local: ASCII letters, digits and . _ % + = -, starting with a
                      letter, a digit or _ (never - or +), no leading, trailing or
                      doubled dot; domain: dot-separated labels of letters, digits
                      and - (not at a label's ends)

Several addresses are separated by commas (``a@lab.example,b@lab.example``), as
Slurm's mail program reads them. A bare local part is a user name (the cluster's
``mail.domain`` is appended when set).
"""

from __future__ import annotations

from corral.errors import InvalidOption
from corral.textcheck import describe, first_control

MAX_ADDRESS = 254  # RFC 5321's path limit, less the angle brackets
MAX_RECIPIENTS = 16
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_LOCAL = _ALNUM | frozenset("._%+=-")
_LOCAL_START = _ALNUM | frozenset("_")
_LABEL = _ALNUM | frozenset("-")


def address_problem(address: str) -> str:
    """Why ``address`` is not one mail address, as a clause ("starts with '-'"); ""
    when it is one."""
    if not address:
        return "is empty"
    if len(address) > MAX_ADDRESS:
        return f"is longer than {MAX_ADDRESS} characters"
    control = first_control(address)
    if control is not None:
        return f"holds a control character ({describe(control)})"
    if address[0] == "-":
        return "starts with '-' (the mail program would read an option)"
    if " " in address:
        return "holds a space"
    local, at, domain = address.partition("@")
    for char in local:
        if char not in _LOCAL:
            return f"holds {char!r} (an address holds letters, digits and . _ % + = - before its @)"
    if local[:1] not in _LOCAL_START:
        return f"starts with {local[:1]!r} (an address starts with a letter, a digit or _)"
    if local.endswith(".") or ".." in local:
        return "has a misplaced '.' before its @"
    if at and not _is_domain(domain):
        return f"has {domain!r} after its @, which is not a domain name"
    return ""


def _is_domain(domain: str) -> bool:
    labels = domain.split(".")
    return len(domain) <= 253 and all(
        0 < len(label) <= 63 and set(label) <= _LABEL and label[0] != "-" and label[-1] != "-"
        for label in labels
    )


def addresses(value: str) -> list[str]:
    """The addresses of a ``--mail-user`` value (comma-separated)."""
    return value.split(",")


def mail_user_problem(value: str) -> str:
    """Why ``value`` is not a list of mail addresses ("" when it is one)."""
    parts = addresses(value)
    if len(parts) > MAX_RECIPIENTS:
        return f"it names more than {MAX_RECIPIENTS} addresses"
    for part in parts:
        why = address_problem(part)
        if why:
            return f"it {why}" if len(parts) == 1 else f"{part!r} {why}"
    return ""


def check_mail_user(value: str) -> str:
    """``value`` when it is a ``--mail-user`` ctld accepts; else InvalidOption naming
    what is wrong."""
    why = mail_user_problem(value)
    if why:
        raise InvalidOption(
            f"Invalid --mail-user {value!r}: {why}; give a user name or an address "
            "(user@domain), several separated by commas"
        )
    return value
