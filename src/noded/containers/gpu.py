"""The job's GPUs inside its container, as enroot's NVIDIA hook gives them: the device
nodes of its GPUs only (and the driver's control nodes), the driver's user-space
libraries and tools bound read-only from the host. With the NVIDIA container toolkit's
CDI spec (/etc/cdi, /var/run/cdi, JSON), its edits are used instead."""

from __future__ import annotations

import functools
import glob
import json
import os
import subprocess
from dataclasses import dataclass, field

LIB_DIR = "/usr/local/corral-nvidia/lib"  # inside: the driver's libraries, by soname
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
LIB_PREFIXES = (
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-ml.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so",
    "libnvidia-gpucomp.so",
    "libnvidia-allocator.so",
    "libnvidia-cfg.so",
    "libnvidia-opencl.so",
)
TOOLS = ("nvidia-smi", "nvidia-debugdump", "nvidia-cuda-mps-control")
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


@dataclass
class GpuEdits:
    binds: list[tuple[str, str]] = field(default_factory=list)  # (host, inside), read-only
    devices: list[str] = field(default_factory=list)  # device nodes, same path inside
    env: dict[str, str] = field(default_factory=dict)


def edits_for(minors: list[int], indices: list[int]) -> GpuEdits:
    """What the container needs for the GPUs with these /dev/nvidia minors (and
    indices, for a CDI spec's device names); empty when the job has none."""
    if not minors and not indices:
        return GpuEdits()
    cdi = _cdi_spec()
    if cdi is not None:
        return _from_cdi(cdi, indices)
    edits = GpuEdits()
    for minor in minors:
        if os.path.exists(f"/dev/nvidia{minor}"):
            edits.devices.append(f"/dev/nvidia{minor}")
    for name in CONTROL_NODES:
        if os.path.exists(f"/dev/{name}"):
            edits.devices.append(f"/dev/{name}")
    for soname, real in _driver_libs():
        edits.binds.append((real, f"{LIB_DIR}/{soname}"))
    for tool in TOOLS:
        for d in ("/usr/bin", "/usr/local/bin", "/usr/sbin"):
            if os.path.isfile(os.path.join(d, tool)):
                edits.binds.append((os.path.join(d, tool), f"/usr/bin/{tool}"))
                break
    if edits.binds:
        edits.env["LD_LIBRARY_PATH"] = LIB_DIR
    return edits


@functools.cache
def _driver_libs() -> tuple[tuple[str, str], ...]:
    """(soname, real file) of the driver's libraries ldconfig knows (64-bit)."""
    try:
        out = subprocess.run(
            ["ldconfig", "-p"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    found: dict[str, str] = {}
    for line in out.splitlines():
        name, _, rest = line.strip().partition(" ")
        if not name.startswith(LIB_PREFIXES) or ("x86-64" not in rest and "64bit" not in rest):
            continue
        path = rest.rsplit("=> ", 1)[-1].strip()
        if os.path.isfile(path):
            found.setdefault(name, os.path.realpath(path))
    return tuple(sorted(found.items()))


def _cdi_spec() -> dict[str, object] | None:
    for d in CDI_DIRS:
        for path in sorted(glob.glob(os.path.join(d, "*.json"))):
            try:
                with open(path, encoding="utf-8") as f:
                    spec = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(spec, dict) and str(spec.get("kind", "")).startswith("nvidia.com/"):
                return spec
    return None


def _apply(edits: GpuEdits, container_edits: object) -> None:
    if not isinstance(container_edits, dict):
        return
    for node in container_edits.get("deviceNodes") or []:
        path = node.get("hostPath") or node.get("path")
        if path and os.path.exists(path):
            edits.devices.append(str(path))
    for mount in container_edits.get("mounts") or []:
        host, inside = mount.get("hostPath"), mount.get("containerPath")
        if host and inside and os.path.exists(host):
            edits.binds.append((str(host), str(inside)))
    for item in container_edits.get("env") or []:
        key, _, value = str(item).partition("=")
        edits.env[key] = value


def _from_cdi(spec: dict[str, object], indices: list[int]) -> GpuEdits:
    """The spec's common edits and those of the job's devices (named by index)."""
    edits = GpuEdits()
    _apply(edits, spec.get("containerEdits"))
    wanted = {str(i) for i in indices}
    for device in spec.get("devices") or []:  # type: ignore[attr-defined]
        if isinstance(device, dict) and str(device.get("name")) in wanted:
            _apply(edits, device.get("containerEdits"))
    libdirs = sorted({os.path.dirname(inside) for _, inside in edits.binds if ".so" in inside})
    if libdirs:  # the toolkit's ldconfig hook is not run: the loader is told instead
        edits.env["LD_LIBRARY_PATH"] = ":".join(libdirs)
    return edits
