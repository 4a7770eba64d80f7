"""What an authenticated caller may do: the authorization table, in one place.

Roles come from uids, never from a name in a request: uid 0 and the users named in
``controller.administrators`` are administrators; they and ``controller.operators``
are operators; so are users whose AdminLevel in the accounting database says so (by
the authenticated user's name); everyone else is a user. docs/security.md shows the table.
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Callable, Iterable

from corral.auth.users import uids_of
from corral.errors import PermissionDenied
from corral.identity import Identity
from corral.wire import corral_pb2 as pb


class Role(enum.IntEnum):
    USER = 0
    OPERATOR = 1
    ADMIN = 2


# action -> who may: "owner" (the job's user, or an operator) or the least role
OWNER = "owner"
TABLE: dict[str, str | Role] = {
    "submit": Role.USER,  # as themselves only: the identity is the job's user
    "cancel": OWNER,
    "signal": OWNER,
    "hold": OWNER,
    "release": OWNER,
    "update": OWNER,
    "requeue": OWNER,
    "run a step in": OWNER,
    "complete a step of": OWNER,
    "complete": OWNER,
    "see the script and environment of": OWNER,
    "release an admin hold": Role.OPERATOR,
    "raise limits of": Role.OPERATOR,  # e.g. TimeLimit past the partition's maximum
    "drain or resume nodes": Role.OPERATOR,
    "update node": Role.OPERATOR,
    "see other users' jobs (private_data)": Role.OPERATOR,
    "manage reservations": Role.ADMIN,
    "creating a reservation": Role.ADMIN,
    "updating a reservation": Role.ADMIN,
    "deleting a reservation": Role.ADMIN,
    "manage partitions": Role.ADMIN,  # the config file only
    "changing the accounting database": Role.OPERATOR,  # sacctmgr add/modify/delete
    "issue tokens": Role.ADMIN,
    "reconfigure": Role.ADMIN,  # scontrol reconfigure: Slurm's super user (AdminLevel=Admin)
}

_SECRET_OPTIONS = ("export", "wrap")  # values that may carry secrets or the script
HIDDEN = "<hidden>"


class Policy:
    """Decides; raises PermissionDenied naming the action and the role it needs."""

    def __init__(
        self,
        operators: Iterable[str],
        administrators: Iterable[str] = ("root",),
        private_data: Iterable[str] = (),
        admin_level: Callable[[str], str] | None = None,
    ) -> None:
        self.operator_uids, self.admin_uids, self.private_data = self.lists(
            operators, administrators, private_data
        )
        # the accounting database's AdminLevel of a user name (sacctmgr ... AdminLevel=)
        self.admin_level = admin_level

    @staticmethod
    def lists(
        operators: Iterable[str], administrators: Iterable[str], private_data: Iterable[str]
    ) -> tuple[frozenset[int], frozenset[int], frozenset[str]]:
        """The config's lists as the policy holds them: uids (root always an
        administrator), and private_data's words."""
        return (
            uids_of(frozenset(operators)),
            uids_of(frozenset(administrators)) | {0},
            frozenset(private_data),
        )

    def role(self, who: Identity) -> Role:
        if who.uid in self.admin_uids:
            return Role.ADMIN
        if who.uid in self.operator_uids:
            return Role.OPERATOR
        if self.admin_level is not None:
            level = self.admin_level(who.user)
            if level == "Administrator":
                return Role.ADMIN
            if level == "Operator":
                return Role.OPERATOR
        return Role.USER

    def is_operator(self, who: Identity) -> bool:
        return self.role(who) >= Role.OPERATOR

    def is_admin(self, who: Identity) -> bool:
        return self.role(who) >= Role.ADMIN

    def may_see(self, who: Identity, job: pb.Job) -> bool:
        """Whether a job of someone else is listed at all (private_data = ["jobs"])."""
        return "jobs" not in self.private_data or job.uid == who.uid or self.is_operator(who)

    def may_see_accounting(self, who: Identity, uid: int) -> bool:
        return "accounting" not in self.private_data or uid == who.uid or self.is_operator(who)

    def sees_spec(self, who: Identity, job: pb.Job) -> bool:
        """Script, environment and --export values: the owner's and operators' only."""
        return job.uid == who.uid or self.is_operator(who)

    def shown(self, who: Identity, job: pb.Job) -> pb.Job:
        """``job`` as ``who`` may see it: the job itself for its owner and operators,
        else a scrubbed copy. Every reply that carries a job (and its steps) takes it
        from here (tests/integration/test_local_attacker_data.py holds every RPC to it)."""
        if self.sees_spec(who, job):
            return job
        out = pb.Job()
        out.CopyFrom(job)
        scrub_job(out)
        return out

    def check_job(self, who: Identity, job: pb.Job, action: str) -> None:
        if who.uid == job.uid or self.is_operator(who):
            return
        raise PermissionDenied(
            f"Access/permission denied: {who.user} may not {action} job {job.job_id} of {job.user}"
        )

    def check_operator(self, who: Identity, action: str) -> None:
        if not self.is_operator(who):
            raise PermissionDenied(f"Access/permission denied: {action} needs an operator")

    def check_admin(self, who: Identity, action: str) -> None:
        if not self.is_admin(who):
            raise PermissionDenied(f"Access/permission denied: {action} needs an administrator")


def _secret_option(word: str) -> str:
    """``word`` as the option whose value is hidden, or "". The commands take any
    unambiguous prefix of a long option (``--wra`` is ``--wrap``), so a prefix counts."""
    if not word.startswith("--"):
        return ""
    name = word[2:].partition("=")[0]
    if len(name) < 2:
        return ""
    return next((f"--{o}" for o in _SECRET_OPTIONS if o.startswith(name)), "")


def scrub_submit_line(line: str) -> str:
    """A submit line as others may see it: ``--export`` values (often secrets) and
    ``--wrap`` scripts hidden."""
    try:
        words = shlex.split(line)
    except ValueError:  # not shell syntax: keep only the command's name
        return f"{line.split(' ', 1)[0]} {HIDDEN}"
    out: list[str] = []
    hide_next = False
    for word in words:
        if hide_next:
            out.append(HIDDEN)
            hide_next = False
            continue
        opt = _secret_option(word)
        if opt and "=" not in word:
            hide_next = True
            out.append(opt)
        elif opt:
            out.append(f"{opt}={HIDDEN}")
        else:
            out.append(shlex.quote(word))
    return " ".join(out)


def scrub_job(job: pb.Job) -> None:
    """What of a job others may not see, removed in place: the script, the environment,
    ``--export`` values and ``--wrap`` text, the job's and each step's (srun's submit
    line carries its own ``--export``), and its unique id."""
    spec = job.spec
    spec.ClearField("script")
    spec.ClearField("environment")
    job.ClearField("unique_id")  # names its checkpoint directory: nobody else's to plant
    spec.submit_line = scrub_submit_line(spec.submit_line)
    if "=" in spec.export:  # NAME=value pairs: values only the owner sees
        spec.export = HIDDEN
    for step in job.steps:
        step.spec.submit_line = scrub_submit_line(step.spec.submit_line)
