"""scontrol reconfigure and SIGHUP on real daemons (issue 35): each class of change to
the config file applies without a restart (partitions, limits, nodes, priority
weights, QOS, [mail], [power], log levels, noded's keys), a restart-only key is named
and not applied, a bad file is refused with the reason and changes nothing; and
through every one of them a running job keeps running, the same processes, to its end.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from corral.testing import LocalCluster
from corral.testing.cluster import ClusterFactory, free_port
from tests.conftest import Commands, wait_for
from tests.integration.realusers import Users, command, raw

pytestmark = pytest.mark.timeout(180)


class Lab:
    """A cluster, its commands, its config file, and one long job that must live on."""

    def __init__(self, cluster: LocalCluster, work: pathlib.Path) -> None:
        self.c = cluster
        self.cmd = Commands(cluster, work)
        self.work = work
        self.done = work / "done"
        self.job = ""
        self.pids: set[int] = set()

    # ------------------------------------------------------------ the config file

    def edit(self, old: str, new: str) -> None:
        text = self.c.config_path.read_text()
        assert old in text, old
        self.c.config_path.write_text(text.replace(old, new, 1))

    def append(self, text: str) -> None:
        self.c.config_path.write_text(self.c.config_path.read_text() + text)

    def reconfigure(self, *, ok: bool = True) -> subprocess.CompletedProcess[str]:
        proc = self.cmd("scontrol", "reconfigure", check=False)
        assert (proc.returncode == 0) == ok, (proc.returncode, proc.stdout, proc.stderr)
        return proc

    # ------------------------------------------------------------ the job that lives on

    def start_long_job(self, node: str, *args: str) -> None:
        """A job on ``node`` that runs until ``done`` exists (an hour's limit), in one
        process (no short-lived children: its processes are compared at the end)."""
        wait = f"import os, time\nwhile not os.path.exists({str(self.done)!r}): time.sleep(0.2)"
        self.job = self.sbatch(
            "-w", node, "-t", "60", *args, "--wrap", f"exec {sys.executable} -c {shlex.quote(wait)}"
        )
        self.c.wait_state(self.job, "RUNNING")
        index = self.c.node_names.index(node)
        self.pids = wait_for(lambda: self.c.node_job_pids(index), 30, "the job's processes")

    def finish_long_job(self, node: str) -> None:
        """The job ran through everything: the same processes, and it completes."""
        assert self.c.state(self.job) == "RUNNING"
        assert self.c.node_job_pids(self.c.node_names.index(node)) == self.pids
        self.done.touch()
        self.c.wait_state(self.job, "COMPLETED")

    def sbatch(self, *args: str) -> str:
        return self.cmd("sbatch", "--parsable", *args).stdout.strip().split(";")[0]

    def ctld_log(self) -> str:
        return (self.c.state_dir / "log" / "ctld.log").read_text()


@pytest.fixture
def lab(cluster_factory: ClusterFactory, tmp_path: pathlib.Path) -> Iterator[Any]:
    def make(**kw: Any) -> Lab:
        kw.setdefault("gpus_per_node", 0)
        kw.setdefault("cpus_per_node", 4)
        work = tmp_path / f"work{len(cluster_factory.started)}"
        work.mkdir()
        return Lab(cluster_factory(**kw), work)

    yield make


def reason(c: LocalCluster, job: str) -> str:
    return str(c.job(job).get("reason", ""))


def partition_line(cmd: Commands, name: str, key: str) -> str:
    out = cmd("scontrol", "show", "partition", name).stdout
    return next(w for w in out.split() if w.startswith(f"{key}="))


# ------------------------------------------------------------------ partitions and limits


def test_a_partition_added_and_a_limit_lowered_apply_to_the_next_submit(lab: Any) -> None:
    lb: Lab = lab(nodes=2)
    lb.start_long_job("node01")  # an hour's limit: above the new MaxTime, it runs on
    queued = lb.sbatch("-H", "-t", "20", "--wrap", "true")  # pending before the change
    lb.edit('max_time = "1-00:00:00"', 'max_time = "00:10:00"')
    lb.append('\n[[partitions]]\nname = "extra"\nnodes = "node02"\nmax_time = "00:05:00"\n')
    out = lb.reconfigure().stdout
    assert "ctld: applied: partitions.debug.max_time, partitions.extra (added)\n" in out
    sinfo = lb.cmd("sinfo", "-h", "-o", "%P %l").stdout.split("\n")
    assert "debug* 10:00" in sinfo and "extra 5:00" in sinfo
    assert partition_line(lb.cmd, "debug", "MaxTime") == "MaxTime=00:10:00"
    # enforced on the next submit: waits with Slurm's reason (EnforcePartLimits=NO)
    over = lb.sbatch("-t", "20", "--wrap", "true")
    wait_for(lambda: reason(lb.c, over) == "PartitionTimeLimit", 30, "PartitionTimeLimit")
    lb.cmd("scontrol", "release", queued)  # a job queued before: judged by the new limit
    wait_for(lambda: reason(lb.c, queued) == "PartitionTimeLimit", 30, "the queued job's")
    fits = lb.sbatch("-p", "extra", "-t", "2", "--wrap", "true")
    lb.c.wait_state(fits, "COMPLETED")
    # a pending job whose only partition goes away ends NODE_FAIL, as in Slurm
    held = lb.sbatch("-p", "extra", "-H", "--wrap", "true")
    text = lb.c.config_path.read_text()
    lb.c.config_path.write_text(text.split('\n[[partitions]]\nname = "extra"')[0])
    out = lb.reconfigure().stdout
    assert "ctld: applied: partitions.extra (removed)" in out
    assert f"ctld: ended pending job(s) {held}: none of their partitions is left" in out
    assert (lb.c.state(held), reason(lb.c, held)) == ("NODE_FAIL", "NodeDown")
    lb.cmd("scancel", over, queued)
    lb.finish_long_job("node01")


# ------------------------------------------------------------------ nodes


def test_a_node_removed_is_refused_registration_and_added_back_registers(lab: Any) -> None:
    lb: Lab = lab(nodes=3)
    lb.start_long_job("node01")
    three, two = 'names = "node[01-03]"', 'names = "node[01-02]"'
    # node01 runs a job: its removal is refused, and nothing else of the file applies
    lb.edit(three, 'names = "node[02-03]"')
    lb.edit('nodes = "node[01-03]"', 'nodes = "node[02-03]"')
    lb.append('\n[[partitions]]\nname = "extra"\nnodes = "node02"\n')
    refused = lb.reconfigure(ok=False)
    assert (
        f"slurm_reconfigure error: node node01 is removed from the config but runs job(s) "
        f"{lb.job}: drain it" in refused.stderr
    )
    assert "extra" not in lb.cmd("sinfo", "-h", "-o", "%P").stdout
    lb.c.config_path.write_text(
        lb.c.config_path.read_text()
        .replace('names = "node[02-03]"', two)
        .replace('nodes = "node[02-03]"', 'nodes = "node[01-02]"')
        .split('\n[[partitions]]\nname = "extra"')[0]
    )
    out = lb.reconfigure().stdout
    assert "ctld: applied: nodes.node03 (removed), partitions.debug.nodes" in out
    assert lb.cmd("sinfo", "-h", "-N", "-o", "%N").stdout.split() == ["node01", "node02"]
    # its noded still runs: its next registration is refused, naming why
    wait_for(
        lambda: "node03 is not in the config" in lb.c.log_tail("node03", 20),
        30,
        "node03's registration refused",
    )
    lb.edit(two, three)
    lb.edit('nodes = "node[01-02]"', 'nodes = "node[01-03]"')
    out = lb.reconfigure().stdout
    assert "ctld: applied: nodes.node03 (added), partitions.debug.nodes" in out

    def node03_idle() -> bool:
        out = lb.cmd("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
        return "node03 idle" in out

    wait_for(node03_idle, 30, "node03 to register again")
    lb.c.wait_state(lb.sbatch("-w", "node03", "--wrap", "true"), "COMPLETED")
    lb.finish_long_job("node01")


# ------------------------------------------------------------------ priority, QOS, restarts


def test_priority_weights_and_qos_apply_and_restart_keys_are_named(lab: Any) -> None:
    lb: Lab = lab(nodes=1)
    lb.start_long_job("node01", "-c", "4")  # the node's every CPU: the next job waits
    waiting = lb.sbatch("--wrap", "true")
    wait_for(lambda: reason(lb.c, waiting) == "Resources", 30, "the job to wait")

    def sprio(*args: str) -> dict[str, str]:
        head, row = lb.cmd("sprio", *args).stdout.splitlines()[:2]
        # right-aligned: -w's row leaves the job's columns blank
        return dict(zip(reversed(head.split()), reversed(row.split()), strict=False))

    assert sprio("-w")["FAIRSHARE"] == "10000"
    before = int(sprio("-j", waiting)["FAIRSHARE"])
    assert before > 0
    metrics = free_port()
    lb.append(
        "\n[priority]\nweight_fairshare = 30000\n"
        '\n[[qos]]\nname = "urgent"\npriority = 100\n'
        '\n[web]\nsession = "1:00:00"\n'
    )
    lb.edit("sched_interval_s = 2.0", f"sched_interval_s = 2.0\nmetrics_port = {metrics}")
    lb.edit("stream_port = 0", "stream_port = 1")  # noded's: its own restart key
    refused = lb.cmd("sbatch", "--qos=urgent", "--wrap", "true", check=False)
    assert refused.returncode != 0 and "Invalid qos" in refused.stderr
    out = lb.reconfigure().stdout.splitlines()
    assert "ctld: applied: priority.weight_fairshare, qos.urgent (added)" in out
    assert "ctld: needs a restart: controller.metrics_port, web.session" in out
    assert "node01: needs a restart: noded.stream_port" in out
    assert sprio("-w")["FAIRSHARE"] == "30000"
    assert int(sprio("-j", waiting)["FAIRSHARE"]) == 3 * before
    wait_for(  # the job's priority is recalculated with the new weight at the next pass
        lambda: int(sprio("-j", waiting)["PRIORITY"]) >= 3 * before, 30, "the new priority"
    )
    urgent = lb.sbatch("--qos=urgent", "-H", "--wrap", "true")
    assert lb.c.job(urgent)["qos"] == "urgent"
    # not applied: nothing listens on the new metrics port; the log names the keys
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", metrics)) != 0
    assert 'keys="controller.metrics_port, web.session"' in lb.ctld_log()
    for job in (waiting, urgent):
        lb.cmd("scancel", job)
    lb.finish_long_job("node01")


# ------------------------------------------------------------------ [mail], [power], logging


def test_mail_power_and_the_log_level_apply_live(lab: Any) -> None:
    lb: Lab = lab(nodes=2)
    lb.start_long_job("node01")
    state = lb.c.state_dir
    mails, suspended = state / "mails", state / "suspended"
    prog = state / "mailprog.sh"
    prog.write_text(f'#!/bin/sh\necho "$2" >> {mails}\n')
    suspend = state / "suspend.sh"  # powers a node off: stops its noded, as test_power_saving
    suspend.write_text(
        f'#!/bin/sh\necho "$1" >> {suspended}\nkill $(cat {state}/run/$1.pid) 2>/dev/null\n'
    )
    resume = state / "resume.sh"
    resume.write_text("#!/bin/sh\ntrue\n")
    for path in (prog, suspend, resume):
        path.chmod(0o755)
    refused = lb.cmd("sbatch", "--mail-type=END", "--wrap", "true", check=False)
    assert refused.returncode != 0 and "mail" in refused.stderr
    submitted = lb.ctld_log().count('event="job submitted"')
    lb.append(
        f'\n[mail]\nprogram = "{prog}"\n'
        f'\n[power]\nsuspend_program = "{suspend}"\nresume_program = "{resume}"\n'
        "suspend_time = 1\nsuspend_timeout = 2\n"
    )
    lb.edit("sched_interval_s = 2.0", 'sched_interval_s = 2.0\nlog_level = "warning"')
    applied = lb.reconfigure().stdout.splitlines()[0].removeprefix("ctld: applied: ")
    assert applied.split(", ") == [
        "controller.log_level",
        "mail.program",
        "power.suspend_program",
        "power.resume_program",
        "power.suspend_time",
        "power.suspend_timeout",
    ]
    # [mail]: a job may ask for mail now, and gets it
    mailed = lb.sbatch("-w", "node01", "--mail-type=END", "--wrap", "true")
    lb.c.wait_state(mailed, "COMPLETED")
    wait_for(lambda: mails.exists() and mailed in mails.read_text(), 30, "the job's mail")
    # [power]: the idle node is powered down; the busy one is not
    wait_for(lambda: suspended.exists() and "node02" in suspended.read_text(), 30, "a suspend")

    def states() -> dict[str, str]:
        rows = lb.cmd("sinfo", "-h", "-N", "-o", "%N %t").stdout.splitlines()
        return dict(row.split() for row in rows)  # type: ignore[misc]

    wait_for(lambda: states().get("node02") == "idle~", 30, "node02 powered down")
    assert states()["node01"] in ("mix", "alloc")
    # logging at warning: the submit above left no info line
    assert lb.ctld_log().count('event="job submitted"') == submitted
    lb.edit('log_level = "warning"', 'log_level = "info"')
    lb.reconfigure()
    lb.c.wait_state(lb.sbatch("-w", "node01", "--wrap", "true"), "COMPLETED")
    assert lb.ctld_log().count('event="job submitted"') == submitted + 1
    lb.finish_long_job("node01")


# ------------------------------------------------------------------ a bad file


def test_a_bad_config_is_refused_with_the_reason_and_nothing_changes(lab: Any) -> None:
    lb: Lab = lab(nodes=1)
    lb.start_long_job("node01")
    good = lb.c.config_path.read_text()
    lowered = good.replace('max_time = "1-00:00:00"', 'max_time = "00:10:00"')
    lb.c.config_path.write_text(lowered + "\n[[partitions]\nname = 'broken'\n")
    refused = lb.reconfigure(ok=False)
    assert refused.stderr.startswith("slurm_reconfigure error: ")
    assert "not valid TOML" in refused.stderr
    lb.c.config_path.write_text(lowered + '\n[[partitions]]\nname = "x"\nnodes = "node99"\n')
    refused = lb.reconfigure(ok=False)
    assert "partitions[1].nodes: 'node99' is not in any [[nodes]] entry" in refused.stderr
    assert partition_line(lb.cmd, "debug", "MaxTime") == "MaxTime=1-00:00:00"  # untouched
    assert "x" not in lb.cmd("sinfo", "-h", "-o", "%P").stdout.split()
    assert 'event="reconfigure refused"' in lb.ctld_log()
    lb.c.config_path.write_text(lowered)  # fixed: now it applies
    lb.reconfigure()
    assert partition_line(lb.cmd, "debug", "MaxTime") == "MaxTime=00:10:00"
    lb.finish_long_job("node01")


# ------------------------------------------------------------------ SIGHUP


def test_sighup_reconfigures_ctld_and_each_noded_on_its_own(lab: Any) -> None:
    lb: Lab = lab(nodes=2)
    lb.start_long_job("node02")
    ctld = lb.c.procs["ctld"].pid
    lb.edit('max_time = "1-00:00:00"', 'max_time = "00:10:00"')
    os.kill(ctld, signal.SIGHUP)
    wait_for(
        lambda: partition_line(lb.cmd, "debug", "MaxTime") == "MaxTime=00:10:00",
        30,
        "ctld to apply the file on SIGHUP",
    )
    assert "source=SIGHUP" in lb.ctld_log()
    # a bad file on SIGHUP: logged with the reason; ctld runs on as it was
    good = lb.c.config_path.read_text()
    lb.c.config_path.write_text(good.replace('"00:10:00"', '"00:05:00"') + "\nbogus = 1\n")
    os.kill(ctld, signal.SIGHUP)
    wait_for(
        lambda: 'event="reconfigure refused" source=SIGHUP' in lb.ctld_log(), 30, "the refusal"
    )
    assert "bogus: unknown key" in lb.ctld_log()
    assert partition_line(lb.cmd, "debug", "MaxTime") == "MaxTime=00:10:00"
    # noded: a prolog set in the file, and only the node that was told applies it
    ran = lb.c.state_dir / "prolog.out"
    prolog = lb.c.state_dir / "prolog.sh"
    prolog.write_text(f'#!/bin/sh\necho "$SLURM_JOB_ID" >> {ran}\n')
    prolog.chmod(0o755)
    lb.c.config_path.write_text(
        good.replace("stream_port = 0", f'stream_port = 0\nprolog = "{prolog}"')
    )
    os.kill(lb.c.procs["node02"].pid, signal.SIGHUP)
    wait_for(lambda: "source=SIGHUP" in lb.c.log_tail("node02", 10), 30, "node02 to reconfigure")
    assert "applied=noded.prolog" in lb.c.log_tail("node02", 10)
    told = lb.sbatch("-w", "node02", "--wrap", "true")
    untold = lb.sbatch("-w", "node01", "--wrap", "true")
    for job in (told, untold):
        lb.c.wait_state(job, "COMPLETED")
    assert ran.read_text().split() == [told]
    lb.finish_long_job("node02")  # its noded was told too: the job never noticed


# ------------------------------------------------------------------ who may


def test_only_an_administrator_reconfigures(lab: Any, users: Users) -> None:
    lb: Lab = lab(nodes=1, controller_config=f'operators = ["root", "{users.op.pw_name}"]')
    lb.append('\n[[partitions]]\nname = "extra"\nnodes = "node01"\n')
    for who in (users.bob, users.op):  # a user, and an operator: Slurm's admins only
        code, _out, err = command(lb.c, who, "scontrol", "reconfigure")
        assert code == 1, err
        denied = "Access/permission denied: reconfigure needs an administrator"
        assert f"slurm_reconfigure error: {denied}" in err
    assert "extra" not in lb.cmd("sinfo", "-h", "-o", "%P").stdout.split()
    # the request names nothing: no path, no key; a field smuggled in is refused
    forged = raw(lb.c, users.bob, "Reconfigure", {"path": "/etc/shadow"})
    assert forged.get("error") == "InvalidRequest", forged
    lb.reconfigure()  # root is
    assert "extra" in lb.cmd("sinfo", "-h", "-o", "%P").stdout.split()
