"""One pass over corral on this machine's GPUs: discovery, a GPU job's accounting,
srun with NCCL, shards, a cgroup OOM, scancel freeing GPU memory, the idle-GPU flag,
no false drain, the GPU metrics. Run as root on a node with the NVIDIA driver:

    python3 scripts/gpu_check.py                # --gpus auto: NVML's GPUs, else fake
    bash scripts/gpu-check.sh                   # the same where the deps come as wheels

``--gpus fake`` runs every step that needs no real GPU the same way (the GPU load is
written into the fake backend's state file, NCCL becomes a plain 2-task srun): the
test suite runs it so (tests/integration/test_gpu_check.py). Each step prints PASS or
FAIL with what it saw; the exit code is the number of failed steps. The cluster is
``corral up --gpus ...`` in ``--state-dir`` (stopped at the end, logs kept there).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable

HERE = pathlib.Path(__file__).resolve().parent
IDLE = '\n[idle_gpus]\nwindow_s = 6\nthreshold_pct = 5.0\naction = "flag"\n'


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.bin = pathlib.Path(args.bin).absolute()
        self.state = pathlib.Path(args.state_dir).resolve()
        self.work = self.state / "work"
        self.real = False
        self.env = dict(os.environ)
        self.failed: list[str] = []

    # ------------------------------------------------------------ plumbing

    def sh(self, *argv: str, check: bool = True, timeout: float = 120) -> str:
        exe = str(self.bin / argv[0]) if (self.bin / argv[0]).exists() else argv[0]
        proc = subprocess.run(
            [exe, *argv[1:]],
            cwd=self.work if self.work.is_dir() else "/",
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr}")
        return proc.stdout + (proc.stderr if not check else "")

    def wait(self, what: str, test: Callable[[], object], timeout: float = 60) -> object:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = test()
            if got:
                return got
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")

    def state_of(self, job: str) -> str:
        return self.sh("sacct", "-j", job, "-X", "-n", "-P", "-o", "State").strip().split(" ")[0]

    def ended(self, job: str, timeout: float = 120) -> str:
        return str(
            self.wait(
                f"job {job} to end",
                lambda: (
                    (s := self.state_of(job)) not in ("", "PENDING", "RUNNING", "COMPLETING") and s
                ),
                timeout,
            )
        )

    def sbatch(self, *argv: str) -> str:
        return self.sh("sbatch", "--parsable", *argv).strip()

    def fake_load(self, util: float, mem_mb: float) -> None:
        """The fake backend's figures (what a real job's load would show)."""
        if self.real:
            return
        path = self.state / "spool" / "node01" / "fake-gpus.json"
        n = 2
        state = {"util": {str(i): util for i in range(n)}}
        state["memory_used_mb"] = {str(i): mem_mb for i in range(n)}
        path.with_suffix(".tmp").write_text(json.dumps(state))
        path.with_suffix(".tmp").replace(path)

    def metrics(self) -> str:
        http = self.env["CORRAL_CTLD_HTTP"].split(",")[0]
        token = (self.state / "metrics.token").read_text().strip()  # corral up made it
        request = urllib.request.Request(
            f"http://{http}/metrics", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            return str(reply.read().decode())

    def step(self, name: str, body: Callable[[], str]) -> None:
        print(f"\n=== {name}", flush=True)
        try:
            said = body()
        except Exception as exc:
            self.failed.append(name)
            print(f"FAIL {name}: {exc}", flush=True)
        else:
            print(f"{said}\nPASS {name}", flush=True)

    # ------------------------------------------------------------ the steps

    def up(self) -> str:
        self.state.parent.mkdir(parents=True, exist_ok=True)
        extra = self.state.parent / f"{self.state.name}-extra.toml"
        extra.write_text(IDLE)
        argv = ["up", "--gpus", self.args.gpus, "--nodes", "1", "--shards-per-gpu", "2"]
        argv += ["--gpus-per-node", "2", "--isolation", "loopback", "--extra-config", str(extra)]
        out = self.sh("corral", *argv, "--state-dir", str(self.state), timeout=180)
        self.real = "real GPU(s) (NVML)" in out
        for line in (self.state / "env.sh").read_text().splitlines():
            if line.startswith("export CORRAL_"):
                key, _, value = line[len("export ") :].partition("=")
                self.env[key] = value
        self.work.mkdir(exist_ok=True)
        self.work.chmod(0o777)
        return out.strip()

    def discovery(self) -> str:
        out = self.wait("the node", lambda: self.sh("sinfo", "-h", "-o", "%N %T %G %c %m"), 30)
        gres = str(out).split()[2]
        assert re.fullmatch(r"gpu:[a-z0-9]+:\d+.*", gres), out
        node = self.sh("scontrol", "show", "node", "node01")
        assert "Gres=gpu:" in node, node
        if self.real:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                check=True,
            )
            count = len(smi.stdout.split("\n")) - 1
            assert gres.startswith("gpu:") and f":{count}" in gres, (gres, smi.stdout)
        return str(out).strip()

    def gpu_job(self) -> str:
        load = f"HOLD_GB=6 python3 {HERE / 'gpu' / 'burn.py'} 12" if self.real else "sleep 8"
        job = self.sbatch("--gres=gpu:1", "-t", "5", "-o", "gpu-%j.out", "--wrap", load)
        self.fake_load(80.0, 6144.0)
        self.wait(f"job {job} to run", lambda: self.state_of(job) == "RUNNING", 60)
        stat = self.wait(
            "sstat's figures",
            lambda: (
                "K" in (s := self.sh("sstat", "-a", "-n", "-P", "-j", job, "-o", "JobID,MaxRSS"))
                and s
            ),
            30,
        )
        state = self.ended(job)
        self.fake_load(0.0, 0.0)
        assert state == "COMPLETED", state
        tres = self.sh("sacct", "-j", job, "-n", "-P", "-o", "JobID,TRESUsageInMax")
        util = re.search(r"gres/gpuutil=(\d+)", tres)
        mem = re.search(r"gres/gpumem=(\d+)M", tres)
        assert util and int(util.group(1)) > 10 and mem and int(mem.group(1)) > 1000, tres
        seff = self.sh("seff", job)
        assert "GPU Utilization:" in seff, seff
        return f"{str(stat).strip()}\n{tres.strip()}\n{seff.strip()}"

    def noded_restart(self) -> str:
        """A GPU job keeps its GPU, its cgroup's device rules and its accounting samples
        through a noded restart (issue 35): noded is killed and started again under it."""
        load = f"HOLD_GB=4 python3 {HERE / 'gpu' / 'burn.py'} 25" if self.real else "sleep 25"
        job = self.sbatch("--gres=gpu:1", "-t", "5", "-o", "gpur-%j.out", "--wrap", load)
        self.fake_load(70.0, 4096.0)
        self.wait(f"job {job} to run", lambda: self.state_of(job) == "RUNNING", 60)
        self.wait("a first sample", lambda: "K" in self._sstat(job), 30)
        before = self._job_pids(job)
        devices = self._devices(job)
        restart_noded(self.state, "node01")
        after = self._job_pids(job)
        assert before and before <= after | {p for p in before if not _alive(p)}, (before, after)
        assert self._devices(job) == devices, "the job's cgroup device rules changed"
        samples = self.wait("samples after the restart", lambda: "K" in self._sstat(job), 30)
        state = self.ended(job)
        self.fake_load(0.0, 0.0)
        assert state == "COMPLETED", state
        shown = self.sh("scontrol", "show", "job", job)
        assert "Restarts=0" in shown, shown
        tres = self.sh("sacct", "-j", job, "-n", "-P", "-o", "JobID,TRESUsageInMax")
        util = re.search(r"gres/gpuutil=(\d+)", tres)
        assert util and int(util.group(1)) > 10, tres
        return f"pids {sorted(before)} kept; {str(samples).strip()}; {tres.strip()}"

    def _sstat(self, job: str) -> str:
        return self.sh("sstat", "-a", "-n", "-P", "-j", job, "-o", "JobID,MaxRSS", check=False)

    def _job_pids(self, job: str) -> set[int]:
        found = set()
        for entry in pathlib.Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    env = (entry / "environ").read_bytes()
                except OSError:
                    continue
                if f"\0SLURM_JOB_ID={job}\0".encode() in b"\0" + env:
                    found.add(int(entry.name))
        return found

    def _devices(self, job: str) -> str:
        """The job's cgroup v1 device rules ("" without a devices controller)."""
        for path in pathlib.Path("/sys/fs/cgroup/devices").glob(f"**/job_{job}/devices.list"):
            return path.read_text()
        return ""

    def srun(self) -> str:
        if self.real:
            nccl = str(HERE / "gpu" / "nccl1.py")
            out = self.sh("srun", "-N1", "-n1", "--gres=gpu:1", "-t", "3", "python3", nccl)
            assert "allreduce 1.0 backend nccl" in out, out
            return out.strip()
        out = self.sh(
            "srun",
            "-n2",
            "--gres=gpu:1",
            "-l",
            "sh",
            "-c",
            'echo "$RANK/$WORLD_SIZE $MASTER_ADDR:$MASTER_PORT gpus=$CUDA_VISIBLE_DEVICES"',
        )
        ranks = sorted(line.split(":")[0] for line in out.splitlines())
        assert ranks == ["0", "1"] and "/2 " in out, out
        return out.strip()

    def shards(self) -> str:
        load = f"HOLD_GB=2 python3 {HERE / 'gpu' / 'burn.py'} 6" if self.real else "sleep 6"
        body = f"{load}; echo SHARDS=$SLURM_SHARDS_ON_NODE GPU=$CUDA_VISIBLE_DEVICES"
        jobs = [self.sbatch("--gres=shard:1", "-t", "5", "-o", "shard-%j.out", "--wrap", body)]
        jobs.append(self.sbatch("--gres=shard:1", "-t", "5", "-o", "shard-%j.out", "--wrap", body))
        both = self.wait(
            "both shard jobs running at once",
            lambda: all(self.state_of(j) == "RUNNING" for j in jobs),
            60,
        )
        assert both
        for j in jobs:
            assert self.ended(j) == "COMPLETED", j
        outs = [(self.work / f"shard-{j}.out").read_text() for j in jobs]
        gpus = {re.search(r"GPU=(\S*)", o).group(1) for o in outs}  # type: ignore[union-attr]
        assert all("SHARDS=1" in o for o in outs) and len(gpus) == 1, outs
        return "".join(outs).strip()

    def oom(self) -> str:
        eat = "python3 -c 'a=bytearray(900*2**20); import time; time.sleep(3)'"
        job = self.sbatch("--mem=200M", "-t", "2", "-o", "oom-%j.out", "--wrap", eat)
        state = self.ended(job)
        assert state == "OUT_OF_MEMORY", state
        return f"job {job}: {state}"

    def scancel_frees(self) -> str:
        load = f"HOLD_GB=20 python3 {HERE / 'gpu' / 'burn.py'} 60" if self.real else "sleep 60"
        job = self.sbatch("--gres=gpu:1", "-t", "5", "-o", "hold-%j.out", "--wrap", load)
        self.wait(f"job {job} to run", lambda: self.state_of(job) == "RUNNING", 60)
        if self.real:
            self.wait("its GPU memory", lambda: self._apps(), 60)
        self.sh("scancel", job)
        state = self.ended(job, 60)
        assert state == "CANCELLED", state
        if self.real:
            self.wait("no process left on the GPUs", lambda: not self._apps(), 30)
        used = re.search(r'corral_node_gpus_allocated\{node="node01"\} (\S+)', self.metrics())
        assert used and float(used.group(1)) == 0.0, used
        return f"job {job}: {state}, its GPU given back" + (", memory freed" if self.real else "")

    def _apps(self) -> list[str]:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout
        return [x for x in out.split() if x.strip()]

    def idle_flag(self) -> str:
        if self.real:
            idle = "python3 -c 'import torch,time; x=torch.ones(1,device=\"cuda\"); time.sleep(30)'"
        else:
            idle = "sleep 30"
        job = self.sbatch("--gres=gpu:1", "-t", "2", "-o", "idle-%j.out", "--wrap", idle)
        self.wait(
            "the idle-GPU flag",
            lambda: self.sh("squeue", "-h", "-j", job, "-o", "%r").strip() == "IdleGPUs",
            40,
        )
        shown = self.sh("scontrol", "show", "job", job)
        assert "IdleGPUsSince=" in shown, shown
        self.sh("scancel", job)
        self.ended(job, 60)
        return f"job {job} flagged IdleGPUs"

    def no_false_drain(self) -> str:
        reasons = self.sh("sinfo", "-R", "-h").strip()
        assert reasons == "", f"drained: {reasons}"
        state = self.wait(
            "node01 idle", lambda: self.sh("sinfo", "-h", "-o", "%T").strip() == "idle", 60
        )
        assert state
        text = self.metrics()
        utils = re.findall(r"corral_gpu_utilization_ratio\{[^}]*\} (\S+)", text)
        healthy = re.findall(r"corral_gpu_healthy\{[^}]*\} (\S+)", text)
        assert utils and healthy and all(float(h) == 1.0 for h in healthy), (utils, healthy)
        if self.real:
            assert not self._apps(), self._apps()
        return f"no drain; {len(utils)} GPUs in /metrics, all healthy"

    def run(self) -> int:
        self.step("corral up", self.up)
        if self.failed:
            return 1
        try:
            for name, body in (
                ("discovery", self.discovery),
                ("a GPU job's accounting (sacct, sstat, seff)", self.gpu_job),
                ("a GPU job through a noded restart", self.noded_restart),
                ("srun" + (" with NCCL" if self.real else " (2 tasks)"), self.srun),
                ("two shard jobs at once on one GPU", self.shards),
                ("cgroup memory limit (OOM)", self.oom),
                ("scancel frees the GPU", self.scancel_frees),
                ("the idle-GPU flag", self.idle_flag),
                ("no false drain, GPU metrics", self.no_false_drain),
            ):
                self.step(name, body)
        finally:
            subprocess.run(
                [str(self.bin / "corral"), "down", "--state-dir", str(self.state)],
                capture_output=True,
                timeout=120,
            )
            if self.args.keep_logs:
                dest = pathlib.Path(self.args.keep_logs)
                dest.mkdir(parents=True, exist_ok=True)
                for log in (self.state / "log").glob("*.log"):
                    shutil.copy(log, dest / log.name)
        print(f"\n{'FAILED: ' + ', '.join(self.failed) if self.failed else 'every step passed'}")
        return len(self.failed)


def _alive(pid: int) -> bool:
    return pathlib.Path(f"/proc/{pid}").exists()


def restart_noded(state: pathlib.Path, node: str, timeout: float = 60) -> None:
    """kill -9 the node's noded (a crash) and start it again as it was started (its
    command line, environment and working directory, from /proc)."""
    pid = int((state / "run" / f"{node}.pid").read_text())
    argv = [a.decode() for a in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    env = dict(
        item.decode().split("=", 1)
        for item in pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if b"=" in item
    )
    cwd = os.readlink(f"/proc/{pid}/cwd")
    ready = state / "run" / f"{node}.ready"
    ready.unlink(missing_ok=True)
    os.kill(pid, 9)
    log = (state / "log" / f"{node}.log").open("ab")
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    (state / "run" / f"{node}.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + timeout
    while not ready.exists():
        assert time.monotonic() < deadline, f"{node}'s noded did not come back"
        time.sleep(0.1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--gpus", choices=("auto", "nvml", "fake"), default="auto")
    p.add_argument("--state-dir", default="/tmp/corral-gpu-check")
    p.add_argument("--bin", default=str(pathlib.Path(sys.executable).parent), help="the commands")
    p.add_argument("--keep-logs", metavar="DIR", help="copy the daemons' logs here at the end")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("gpu_check: run as root (cgroups, jobs as their users)", file=sys.stderr)
        return 1
    return Check(args).run()


if __name__ == "__main__":
    sys.exit(main())
