"""The GPU path of containers on this machine: a job with ``--gres=gpu:1
--container-image=...`` sees exactly its GPU with ``nvidia-smi -L`` and runs a CUDA
computation inside its container. Run as root on a node with the NVIDIA driver, crun,
fuse-overlayfs and squashfs-tools:

    python3 scripts/gpu_container_check.py [--image IMAGE] [--state-dir DIR]

The image is, by default, a static busybox packed into squashfs here (no network),
with the host's /usr, /lib, /lib64 and this Python's prefix bound in read-only so a
Python runs inside; the driver's libraries and nvidia-smi come from noded (as enroot's
NVIDIA hook gives them; the CDI spec when the container toolkit made one). The CUDA
computation calls the driver API through ctypes (a memset on the GPU, copied back and
checked), and a torch matmul when torch imports. ``--image`` names an image with its
own Python (a CUDA PyTorch .sqsh, say): then nothing of the host's is bound.

Each step prints PASS, FAIL or SKIP with what it saw; the exit code is the number of
failed steps. The cluster is ``corral up`` in ``--state-dir`` (stopped at the end).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

CUDA = r"""
import ctypes, os, sys
cuda = ctypes.CDLL("libcuda.so.1")
def ok(rc, what):
    if rc != 0:
        sys.exit(f"{what} failed: CUDA error {rc}")
ok(cuda.cuInit(0), "cuInit")
n = ctypes.c_int()
ok(cuda.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
dev = ctypes.c_int()
ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
name = ctypes.create_string_buffer(100)
ok(cuda.cuDeviceGetName(name, 100, dev), "cuDeviceGetName")
ctx = ctypes.c_void_p()
ok(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
count = 1 << 20
ptr = ctypes.c_uint64()
ok(cuda.cuMemAlloc_v2(ctypes.byref(ptr), count * 4), "cuMemAlloc")
ok(cuda.cuMemsetD32_v2(ptr, 0x2A, count), "cuMemsetD32")
host = (ctypes.c_uint32 * count)()
ok(cuda.cuMemcpyDtoH_v2(host, ptr, count * 4), "cuMemcpyDtoH")
assert all(v == 0x2A for v in host[:: 4096]), "wrong values back from the GPU"
print(f"devices={n.value} name={name.value.decode()} memset+copy of {count} words: ok")
try:
    import torch
except ImportError:
    print("torch: not importable here")
else:
    a = torch.ones(1024, 1024, device="cuda")
    print(f"torch {torch.__version__}: matmul sum={float((a @ a).sum()):.0f}")
print(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}")
"""


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.bin = pathlib.Path(sys.executable).parent
        self.state = pathlib.Path(args.state_dir).resolve()
        self.env = dict(os.environ)
        self.failed: list[str] = []
        self.image = args.image

    def sh(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        exe = str(self.bin / argv[0]) if (self.bin / argv[0]).exists() else argv[0]
        return subprocess.run(
            [exe, *argv[1:]],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(self.state),
        )

    def step(self, name: str, body: object) -> None:
        print(f"\n=== {name}", flush=True)
        try:
            said = body()  # type: ignore[operator]
        except Skip as exc:
            print(f"SKIP {name}: {exc}", flush=True)
        except Exception as exc:
            self.failed.append(name)
            print(f"FAIL {name}: {exc}", flush=True)
        else:
            print(f"{said}\nPASS {name}", flush=True)

    def host_gpus(self) -> str:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise Skip(f"nvidia-smi -L on the host failed: {out.stderr.strip()}")
        return out.stdout.strip()

    def up(self) -> str:
        self.state.mkdir(parents=True, exist_ok=True)
        self.state.chmod(0o755)
        n = len(self.host_gpus().splitlines())
        out = self.sh(
            "corral",
            "up",
            "--gpus",
            "auto",
            "--nodes",
            "1",
            "--gpus-per-node",
            str(n),
            "--isolation",
            "loopback",
            "--state-dir",
            str(self.state / "cluster"),
        )
        if out.returncode != 0:
            raise AssertionError(out.stderr)
        for line in (self.state / "cluster" / "env.sh").read_text().splitlines():
            if line.startswith("export CORRAL_"):
                key, _, value = line[len("export ") :].partition("=")
                self.env[key] = value
        return out.stdout.strip()

    def build(self) -> str:
        if self.image:
            return f"using {self.image}"
        from corral.testing.images import build

        self.image = build(str(self.state / "image")).squashfs
        return f"built {self.image}"

    def mounts(self) -> list[str]:
        if self.args.image:  # the image brings its own Python
            return []
        binds = {"/usr", "/lib", "/lib64", sys.base_prefix, sys.prefix}
        entries = [f"{p}:{p}:ro" for p in sorted(binds) if os.path.isdir(p)]
        return [f"--container-mounts={','.join(entries)}"]

    def smi(self) -> str:
        out = self.sh(
            "srun", "-n1", "--gres=gpu:1", f"--container-image={self.image}", "nvidia-smi", "-L"
        )
        assert out.returncode == 0, out.stderr
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("GPU ")]
        assert len(lines) == 1, f"the container sees {len(lines)} GPUs: {out.stdout}"
        uuid = lines[0].rsplit("UUID: ", 1)[-1].rstrip(")")
        assert uuid in self.host_gpus(), f"{uuid} is not one of the host's GPUs"
        return out.stdout.strip()

    def compute(self) -> str:
        python = self.args.python or (
            "python3" if self.args.image else str(pathlib.Path(sys.executable).resolve())
        )
        out = self.sh(
            "srun",
            "-n1",
            "--gres=gpu:1",
            f"--container-image={self.image}",
            *self.mounts(),
            python,
            "-c",
            CUDA,
        )
        assert out.returncode == 0, out.stderr or out.stdout
        assert "devices=1 " in out.stdout, out.stdout
        return out.stdout.strip()

    def through_restart(self) -> str:
        """A container job with --gres=gpu:1 keeps its GPU through a noded restart (its
        container's processes under the job's supervisor; issue 35)."""
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
        from gpu_check import restart_noded

        script = (
            "nvidia-smi -L; sleep 12; nvidia-smi -L"
            if self.args.image
            else "ls /dev | grep -c nvidia; sleep 12; ls /dev | grep -c nvidia"
        )
        out_file = self.state / "ctr-restart.out"
        submit = self.sh(
            "sbatch",
            "--parsable",
            "--gres=gpu:1",
            f"--container-image={self.image}",
            *self.mounts(),
            "-o",
            str(out_file),
            "--wrap",
            script,
        )
        assert submit.returncode == 0, submit.stderr
        job = submit.stdout.strip()
        deadline = time.monotonic() + 60
        while "RUNNING" not in self.sh("squeue", "-h", "-j", job, "-o", "%T").stdout:
            assert time.monotonic() < deadline, f"job {job} did not start"
            time.sleep(0.2)
        restart_noded(self.state / "cluster", "node01")
        while self.sh("squeue", "-h", "-j", job, "-o", "%T").stdout.strip():
            assert time.monotonic() < deadline + 60, f"job {job} did not end"
            time.sleep(0.5)
        acct = self.sh("sacct", "-X", "-n", "-P", "-j", job, "-o", "State,Restarts").stdout
        assert acct.strip().startswith("COMPLETED"), acct
        text = out_file.read_text()
        halves = [ln for ln in text.splitlines() if ln.strip()]
        assert len(halves) >= 2 and halves[0] == halves[-1], text
        return f"{acct.strip()}; the container saw the same GPU before and after: {halves[0]}"

    def down(self) -> None:
        self.sh("corral", "down", "--state-dir", str(self.state / "cluster"))


class Skip(Exception):
    pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="", help="an image with CUDA user space (else busybox)")
    parser.add_argument("--python", default="", help="the Python to run inside")
    parser.add_argument("--state-dir", default="", help="the cluster's state (default: a temp dir)")
    args = parser.parse_args()
    args.state_dir = args.state_dir or tempfile.mkdtemp(prefix="corral-gpu-ctr-")
    check = Check(args)
    check.step("nvidia-smi -L on the host", check.host_gpus)
    check.step("corral up", check.up)
    try:
        check.step("the image", check.build)
        check.step("nvidia-smi -L in a container sees exactly the job's GPU", check.smi)
        check.step("a CUDA computation in a container", check.compute)
        check.step("a GPU container job through a noded restart", check.through_restart)
    finally:
        check.down()
    print(f"\n{len(check.failed)} failed: {', '.join(check.failed) or '-'}")
    return len(check.failed)


if __name__ == "__main__":
    sys.exit(main())
