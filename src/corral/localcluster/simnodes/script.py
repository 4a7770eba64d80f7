"""What a simulated job does, read off its script and environment: how long it runs,
how it exits, what it uses (first match wins; see the package's docstring)."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from corral.wire import corral_pb2 as pb

_SIM_LINE = re.compile(r"^\s*#SIM\b(.*)$", re.MULTILINE)
_SLEEP = re.compile(r"(?:^|[;&|\s])sleep\s+([0-9]+(?:\.[0-9]+)?)\b")


@dataclass
class Script:
    """What a simulated job does: how long it runs, how it exits, what it uses."""

    runtime_s: float
    exit_code: int = 0
    rss_mb: float = 0.0
    gpu_util: float = 0.0


def parse_script(job: pb.Job, environment: dict[str, str], default_runtime_s: float) -> Script:
    text = job.spec.script
    script = Script(runtime_s=default_runtime_s)
    found = False
    for line in _SIM_LINE.findall(text):
        for word in line.split():
            key, _, value = word.partition("=")
            try:
                if key == "runtime":
                    script.runtime_s, found = float(value), True
                elif key == "exit":
                    script.exit_code = int(value)
                elif key == "rss_mb":
                    script.rss_mb = float(value)
                elif key == "gpu_util":
                    script.gpu_util = float(value)
            except ValueError:
                continue  # a bad directive is ignored, as a shell ignores a comment
    env = {**dict(job.spec.environment), **environment}
    if not found and "CORRAL_SIM_RUNTIME" in env:
        with contextlib.suppress(ValueError):
            script.runtime_s, found = float(env["CORRAL_SIM_RUNTIME"]), True
    if "CORRAL_SIM_EXIT" in env:
        with contextlib.suppress(ValueError):
            script.exit_code = int(env["CORRAL_SIM_EXIT"])
    if not found:
        m = _SLEEP.search(text)
        if m:
            script.runtime_s = float(m.group(1))
    return script
