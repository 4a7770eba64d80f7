"""``corral up`` / ``corral down`` as an operator runs them."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import pid_alive, wait_for

BIN = pathlib.Path(sys.executable).parent


def test_up_runs_jobs_and_down_leaves_nothing(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    up = subprocess.run(
        [
            str(BIN / "corral"),
            "up",
            "--nodes",
            "3",
            "--gpus-per-node",
            "4",
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    try:
        assert up.returncode == 0, up.stderr
        assert f"source {state}/env.sh" in up.stdout
        pids = [
            int((state / "run" / f"{n}.pid").read_text())
            for n in ("ctld", "node01", "node02", "node03")
        ]
        assert all(pid_alive(p) for p in pids)
        again = subprocess.run(
            [str(BIN / "corral"), "up", "--state-dir", str(state)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 1 and "already runs" in again.stderr
        script = f"source {state}/env.sh && cd {tmp_path} && sbatch --parsable --wrap 'echo ok'"
        job = subprocess.run(
            ["bash", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            env={k: v for k, v in os.environ.items() if not k.startswith("CORRAL")},
        )
        assert job.returncode == 0, job.stderr
        out = tmp_path / f"slurm-{job.stdout.strip()}.out"
        wait_for(lambda: out.exists() and out.read_text() == "ok\n", 30, "job output")
        # a shell where something else answers to `sbatch` (a function, as a site's
        # profile may define) is warned, naming ours; a clean one is not
        shadowed = subprocess.run(
            ["bash", "-c", f"sbatch() {{ :; }}; source {state}/env.sh"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "warning: sbatch here is 'sbatch', not corral's" in shadowed.stderr
        assert f"({BIN}/sbatch)" in shadowed.stderr
        clean = subprocess.run(
            ["bash", "-c", f"source {state}/env.sh && command -v sbatch"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert (clean.stdout, clean.stderr) == (f"{BIN}/sbatch\n", "")
    finally:
        down = subprocess.run(
            [str(BIN / "corral"), "down", "--state-dir", str(state)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert down.returncode == 0 and "stopped" in down.stdout
    wait_for(lambda: not any(pid_alive(p) for p in pids), 20, "daemons to exit")
    assert not list((state / "run").glob("*.pid"))


def test_ctld_refuses_a_bad_config_naming_the_key(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text('[controller]\ngrpc_port = "high"\n')
    proc = subprocess.run(
        [str(BIN / "corral"), "ctld", "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "controller.grpc_port: expected an integer, got str" in proc.stderr


def test_up_with_simulated_nodes_runs_jobs_on_them(tmp_path: pathlib.Path) -> None:
    state = tmp_path / "state"
    corral = str(BIN / "corral")
    up = subprocess.run(
        [corral, "up", "--simulated-nodes", "50", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert up.returncode == 0, up.stderr
        assert "50 simulated node(s)" in up.stdout
        pids = [int((state / "run" / f"{n}.pid").read_text()) for n in ("ctld", "simnodes")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL")}
        script = (
            f"source {state}/env.sh && cd {tmp_path} && "
            "sbatch --parsable -N50 --gres=gpu:8 --wrap 'sleep 1'"
        )
        out = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env
        )
        assert out.returncode == 0, out.stderr
        job = out.stdout.strip()

        def state_of() -> str:
            q = f"source {state}/env.sh && sacct -n -X -P -o State -j {job}"
            got = subprocess.run(["bash", "-c", q], capture_output=True, text=True, env=env)
            return got.stdout.strip()

        wait_for(lambda: state_of() == "COMPLETED", 30, "the 50-node job to complete")
    finally:
        down = subprocess.run(
            [corral, "down", "--state-dir", str(state)], capture_output=True, text=True, timeout=60
        )
    assert down.returncode == 0 and "simnodes" in down.stdout
    wait_for(lambda: not any(pid_alive(p) for p in pids), 20, "daemons to exit")


def test_up_gpus_auto_without_gpus_makes_fake_ones_and_says_so(tmp_path: pathlib.Path) -> None:
    """issue 26: one command for a workstation's GPUs; on a machine without any (NVML
    finds none: this one) ``auto`` falls back to fake GPUs and says why, ``nvml`` refuses."""
    from corral.gpuprobe import probe_nvml

    if probe_nvml().count:
        pytest.skip("this machine has GPUs NVML sees: scripts/gpu_check.py covers them")
    corral = str(BIN / "corral")
    state = tmp_path / "state"
    refused = subprocess.run(
        [corral, "up", "--gpus", "nvml", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith("corral: error: --gpus nvml: no GPU to use: "), refused.stderr
    assert not (state / "run" / "ctld.pid").exists()
    argv = ["up", "--gpus", "auto", "--nodes", "1", "--gpus-per-node", "2"]
    up = subprocess.run(
        [corral, *argv, "--isolation", "loopback", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=90,
    )
    try:
        assert up.returncode == 0, up.stderr
        lines = up.stdout.splitlines()
        assert lines[0].startswith("corral: --gpus auto: no NVIDIA GPU found (NVML "), lines
        assert lines[0].endswith("): 2 fake GPU(s) per node instead"), lines
        assert "1 node(s) with 2 fake GPU(s) each" in up.stdout
        env = {**os.environ, "CORRAL_CONF": str(state / "corral.toml")}
        env["CORRAL_CTLD_SOCKET"] = next(
            line.split("=", 1)[1]
            for line in (state / "env.sh").read_text().splitlines()
            if line.startswith("export CORRAL_CTLD_SOCKET=")
        )
        gres = subprocess.run(
            [str(BIN / "sinfo"), "-h", "-o", "%G"], capture_output=True, text=True, env=env
        )
        assert gres.stdout.strip() == "gpu:h100:2", gres
    finally:
        subprocess.run([corral, "down", "--state-dir", str(state)], capture_output=True, timeout=60)
