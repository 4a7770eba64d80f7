"""corral.config is a package, one module per group of sections, whose names are all
importable from ``corral.config`` as when it was one module, each loaded on first use."""

from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

import corral.config

INIT = pathlib.Path(corral.config.__file__)

# every public name of the one-module corral/config.py, before the split
BEFORE = {
    "AUTH_TYPES", "CONFIG_ENV", "DEFAULT_CONFIG_PATH", "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT", "DEFAULT_NODED_PORT", "DEFAULT_NODE_PORT", "DEFAULT_SOCKET",
    "ENFORCE", "PREEMPT_MODES", "PRIVATE_DATA", "TRES_NAMES", "AccountConfig",
    "AuthConfig", "ClusterConfig", "ControllerConfig", "ControllerHost", "GpuConfig",
    "HeartbeatConfig", "IdleGpuConfig", "MailConfig", "NodeConfig", "NodedConfig",
    "PartitionConfig", "PriorityConfig", "QosConfig", "SchedulerConfig", "TlsConfig",
    "WebConfig", "config_path", "load_config", "parse_config", "preempt_loop",
}  # fmt: skip


def type_checking_imports() -> dict[str, str]:
    tree = ast.parse(INIT.read_text())
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module not in ("typing", "__future__")
        ):
            found.update({alias.name: node.module for alias in node.names})
    return found


#: names added since the split, each with its section's module
ADDED = {"CONTAINER_FEATURE", "ContainersConfig"}  # [containers] (issue 24)


def test_every_name_of_the_one_module_is_still_importable() -> None:
    assert set(corral.config.__all__) == BEFORE | ADDED
    for name in BEFORE | ADDED:
        value = getattr(corral.config, name)
        module = importlib.import_module(corral.config._WHERE[name])
        assert getattr(module, name) is value, name


def test_the_lazy_table_matches_what_mypy_sees() -> None:
    assert type_checking_imports() == corral.config._WHERE


def test_a_command_finding_its_controller_loads_only_the_paths() -> None:
    """corral/rest.py reads config_path and the default port and socket from here on
    every command without env.sh: that must not load the dataclasses and parsers."""
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "from corral.config import DEFAULT_HTTP_PORT, DEFAULT_SOCKET, config_path\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert set(out.stdout.split()) <= {
        "__future__",
        "corral",
        "corral.config",
        "corral.config.paths",
    }
