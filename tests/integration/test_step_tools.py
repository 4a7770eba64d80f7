"""sstat, sattach and seff on real daemons (issue 26), beside what the real Slurm 22.05
printed (tests/anchors/slurm-22.05): the same columns, layout and lines; sattach
for the step's owner only (a real second user is refused)."""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

from corral.testing.cluster import ClusterFactory
from corral.testing.harness import wait_for
from tests.conftest import BIN, Commands
from tests.integration.realusers import Users, command

pytestmark = pytest.mark.timeout(240)
ANCHOR = pathlib.Path(__file__).resolve().parents[1] / "anchors" / "slurm-22.05"

# a step whose 2 tasks print a line on stdout and stderr every 0.5 s until told to stop
STEP = (
    "srun -n2 bash -c 'i=0; while [ ! -e stop ]; do i=$((i+1)); echo out$SLURM_PROCID-$i; "
    'echo err$SLURM_PROCID-$i >&2; python3 -c "a=bytearray(20*2**20); import time; '
    "time.sleep(0.5)\"; done'"
)


def test_sstat_sattach_seff_beside_slurm(
    tmp_path: pathlib.Path, cluster_factory: ClusterFactory, users: Users
) -> None:
    c = cluster_factory(nodes=1, gpus_per_node=0, heartbeat_interval_s=1.0)
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o777)
    cmd = Commands(c, work)
    job = cmd("sbatch", "--parsable", "-n2", "--wrap", STEP).stdout.strip()
    c.wait_state(job, "RUNNING")

    def step_sampled() -> str | None:
        out = cmd("sstat", "-n", "-P", "-j", job, "-o", "JobID,MaxRSS,NTasks").stdout.strip()
        parts = out.split("|")
        return out if len(parts) == 3 and parts[1] not in ("", "0K") else None

    line = wait_for(step_sampled, 30, "the step's first samples")
    jobid, rss, ntasks = line.split("|")
    assert jobid == f"{job}.0" and ntasks == "2" and int(rss[:-1]) > 20 * 1024

    # sstat's layout is Slurm's: the header lines, the columns' widths
    ours = cmd("sstat", "-j", job).stdout.splitlines()
    theirs = (ANCHOR / "sstat_default.txt").read_text().splitlines()
    assert ours[:2] == theirs[:2]
    assert len(ours) == 3 and ours[2].startswith(f"{job}.0 ")
    ours = cmd("sstat", "-j", job, "-o", "JobID,MaxRSS,AveCPU,NTasks,TRESUsageInMax").stdout
    theirs = (ANCHOR / "sstat_o.txt").read_text()
    assert ours.splitlines()[:2] == theirs.splitlines()[:2]
    assert len(ours.splitlines()[2]) == len(theirs.splitlines()[2])  # fixed columns
    allsteps = cmd("sstat", "-a", "-n", "-P", "-j", job, "-o", "JobID,Pids").stdout.split()
    assert [x.split("|")[0] for x in allsteps] == [f"{job}.batch", f"{job}.0"]
    gone = cmd("sstat", "-j", f"{job}.7")
    assert (
        gone.returncode == 0 and f"sstat: error: StepId={job}.7 not found running." in gone.stderr
    )

    # sattach -l: what the step printed (its recent output first), labelled as Slurm's
    proc = subprocess.Popen(
        [str(BIN / "sattach"), "-l", f"{job}.0"],
        cwd=work,
        env=cmd.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    filtered = subprocess.Popen(
        [str(BIN / "sattach"), "--output-filter=1", f"{job}.0"],
        cwd=work,
        env=cmd.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    layout = cmd("sattach", "--layout", f"{job}.0").stdout
    assert layout == (
        "Job step layout:\n\t2 tasks, 1 nodes (node01)\n\n\tNode 0 (node01), 2 task(s): 0 1 \n"
    )
    # another user may not attach, even to read
    code, out, err = command(c, users.alice, "sattach", f"{job}.0")
    assert code == 1 and "Could not get job step info: Access/permission denied" in err, err
    code, out, err = command(c, users.alice, "sstat", "-j", job)
    assert "Invalid user id" in err and f"{job}.0" not in out, (out, err)
    (work / "stop").touch()
    out, err = proc.communicate(timeout=60)
    fout, ferr = filtered.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines and all(re.fullmatch(r"[01]: out[01]-\d+", x) for x in lines), lines
    assert {x[0] for x in lines} == {"0", "1"}
    assert all(re.fullmatch(r"[01]: err[01]-\d+", x) for x in err.splitlines()), err
    # as Slurm's (sattach_f.*): the error filter follows the output filter
    assert fout and all(x.startswith("out1-") for x in fout.splitlines()), fout
    assert all(x.startswith("err1-") for x in ferr.splitlines()), ferr
    c.wait_state(job, "COMPLETED")

    # seff: Slurm's lines (contribs/seff), then the GPU ones
    report = cmd("seff", job).stdout.splitlines()
    assert report[0] == f"Job ID: {job}"
    assert report[1] == "Cluster: corral"
    assert report[2] == "User/Group: root/root"
    assert report[3] == "State: COMPLETED (exit code 0)"
    assert report[4:6] == ["Nodes: 1", "Cores per node: 2"]
    assert re.fullmatch(r"CPU Utilized: \d\d:\d\d:\d\d", report[6])
    assert re.fullmatch(r"CPU Efficiency: \d+\.\d\d% of \d\d:\d\d:\d\d core-walltime", report[7])
    assert re.fullmatch(r"Job Wall-clock time: \d\d:\d\d:\d\d", report[8])
    assert re.fullmatch(r"Memory Utilized: \d+\.\d\d [KMG]B", report[9])
    missing = cmd("seff", "999999", check=False)
    assert missing.returncode == 2 and missing.stderr == "Job not found.\n"
    assert cmd("seff", check=False).stdout.startswith("Usage: seff [Options] <Jobid>")
