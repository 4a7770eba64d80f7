"""Containers: the start-up cost of a step in a container against the same step bare.

``srun -n1 true`` inside an allocation, bare and with ``--container-image``: cold (the
image imported on this first use: each cold run names a fresh copy, so nothing is
cached) and warm (cached), for a small image (a static busybox, a few MB) and a big
one (the same plus an incompressible filler, ``--big-mb``; the issue's figure is
5 GB). The aim: warm overhead under 300 ms per step, a cached big image as fast as a
small one (the cache is unpacked: a container is a fuse-overlayfs mount over it, whose
cost does not grow with the image).

The machine is shared: run it as ``nice -n 19 .venv/bin/python -m bench.containers``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

from bench.common import VENV_BIN, PhaseResult, Table, bench_cluster, log, ms, save_result, summary
from corral.testing.images import build, missing_tools, runtime_blocker


def _wall(argv: list[str], env: dict[str, str], cwd: Any) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[1:4]} exited {proc.returncode}: {proc.stderr.strip()[-200:]}")
    return wall


def _fresh_copy(image: str, base: str, n: int) -> str:
    """A copy with one byte more (a new digest: a cold import)."""
    path = os.path.join(base, f"cold{n}-{os.path.basename(image)}")
    shutil.copyfile(image, path)
    with open(path, "ab") as f:
        f.write(os.urandom(4096))  # squashfs ignores what follows its image
    os.chmod(path, 0o644)
    return path


def run(quick: bool = False, big_mb: int = 0) -> PhaseResult:
    big_mb = big_mb or (200 if quick else 1024)
    warm_runs, cold_runs = (5, 1) if quick else (15, 3)
    result = PhaseResult(
        "containers", {"warm runs": warm_runs, "cold runs": cold_runs, "big image": f"{big_mb} MiB"}
    )
    table = Table(
        "srun -n1 true in an allocation: bare, and in a container (cold: first import; "
        "warm: cached)",
        ["case", "image size", "runs", "min", "p50", "p95", "overhead (p50)"],
    )
    result.tables.append(table)
    why = ", ".join(missing_tools()) or runtime_blocker()
    if why:
        table.notes.append(f"not run here: {why}")
        return result
    base = tempfile.mkdtemp(prefix="corral-bench-images-")
    os.chmod(base, 0o755)
    try:
        log("containers: building the images")
        small = build(os.path.join(base, "small"), oci=False).squashfs
        big = build(os.path.join(base, "big"), filler_bytes=big_mb << 20, oci=False).squashfs
        shutil.rmtree(os.path.join(base, "big", "rootfs"))  # its squashfs is enough
        srun = str(VENV_BIN / "srun")
        with bench_cluster("containers", nodes=1) as cluster:
            env = {**cluster.env(), "SLURM_JOB_ID": _allocation_1(cluster)}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            cwd = cluster.work_dir
            _wall([srun, "-n1", "true"], env, cwd)  # warm-up
            bare = summary([_wall([srun, "-n1", "true"], env, cwd) for _ in range(warm_runs)])
            table.add(
                "bare", "-", warm_runs, ms(bare["min"]), ms(bare["median"]), ms(bare["p95"]), "-"
            )
            result.data["bare"] = bare
            sizes = {"small": small, "big": big}
            samples: dict[str, list[float]] = {}
            for label, image in sizes.items():
                samples[f"{label} cold"] = []
                for n in range(cold_runs):
                    copy = _fresh_copy(image, base, n)
                    log(f"containers: {label} cold {n}")
                    argv = [srun, "-n1", f"--container-image={copy}", "true"]
                    samples[f"{label} cold"].append(_wall(argv, env, cwd))
                    os.unlink(copy)
                _wall([srun, "-n1", f"--container-image={image}", "true"], env, cwd)  # import
            # warm runs alternate between the images: the same load weighs on both
            log("containers: warm runs")
            for label in sizes:
                samples[f"{label} warm"] = []
            for _ in range(warm_runs):
                for label, image in sizes.items():
                    argv = [srun, "-n1", f"--container-image={image}", "true"]
                    samples[f"{label} warm"].append(_wall(argv, env, cwd))
            for label, image in sizes.items():
                size = f"{os.path.getsize(image) / 2**20:.0f} MiB"
                for kind in ("cold", "warm"):
                    s = summary(samples[f"{label} {kind}"])
                    result.data[f"{label} {kind}"] = {**s, "image_bytes": os.path.getsize(image)}
                    table.add(
                        f"{label} image, {kind}",
                        size,
                        s["n"],
                        ms(s["min"]),
                        ms(s["median"]),
                        ms(s["p95"]),
                        ms(s["median"] - bare["median"]),
                    )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    table.notes.append(
        "overhead: the container's p50 less the bare p50 (import, a fuse-overlayfs mount, "
        "crun's start and teardown); jobs run as root here (the bench's user)"
    )
    table.notes.append(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return result


def _allocation_1(cluster: Any) -> str:
    """An allocation of the one node (srun_bench's asks for two)."""
    client = cluster.client()
    spec = {"workDir": str(cluster.work_dir), "name": "bench", "allocationOnly": True}
    job_id = str(client.submit_job({"spec": spec})["jobId"])
    cluster.wait_state(job_id, "RUNNING", timeout=30)
    return job_id


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer runs, a 200 MiB big image")
    parser.add_argument("--big-mb", type=int, default=0, help="the big image's filler (MiB)")
    args = parser.parse_args()
    t0 = time.monotonic()
    result = run(args.quick, args.big_mb)
    result.elapsed_s = time.monotonic() - t0
    print(result.render())
    log(f"results: {save_result(result)}")


if __name__ == "__main__":
    main()
