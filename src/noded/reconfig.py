"""SIGHUP to noded, and ctld's Reconfigure (``scontrol reconfigure`` asks every node):
noded reads its config file again and applies what it reads live, without a restart
(docs/admin-guide.md#reconfigure).

The same steps as ctld's (corral/config/reload.py): the whole file read and validated
first (refused with the reason, nothing changed, otherwise); the changes that concern
this node (its own [[nodes]] entry, not another's; [dynamic_nodes] for a dynamic node
only), each live or restart-only for noded; the live ones applied at once on the event
loop; the restart-only ones (ports, the spool, cgroups, TLS, this node's size and
GPUs: its discovery is made at start) named, unapplied. Running jobs are untouched:
what a job started with (its prolog, limits, environment) is its own; the next job
gets the new values.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import structlog

from corral.config import ClusterConfig, load_config
from corral.config.diff import REMOVED, Changed
from corral.config.keyclasses import NODED
from corral.config.reload import plan
from corral.errors import ConfigError
from corral.log import set_level
from corral.wire import corral_pb2 as pb
from noded.batch import BatchStarter
from noded.launcher import Launcher
from noded.steps import StepRunner

log = structlog.get_logger("noded")


class NodedReconfig:
    def __init__(
        self,
        config: ClusterConfig,
        name: str,
        launcher: Launcher,
        steps: StepRunner,
        *,
        dynamic: bool = False,
        loader: Callable[[str], ClusterConfig] = load_config,
    ) -> None:
        # the file's config as noded runs it (restart-only keys at their running values)
        self.config = config
        self.name = name
        self.launcher = launcher
        self.steps = steps
        self.dynamic = dynamic
        self.loader = loader
        self._lock = asyncio.Lock()  # SIGHUP and ctld's call: one at a time

    def _mine(self, change: Changed) -> bool:
        if change.section == "nodes":
            return change.item == self.name and not self.dynamic
        if change.section == "dynamic_nodes":
            return self.dynamic
        return True

    async def reconfigure(self, source: str) -> pb.Reconfigured:
        """Read the file again and apply it; the answer ctld relays (``source`` logged)."""
        async with self._lock:
            try:
                new = await asyncio.to_thread(self.loader, self.config.source)
            except ConfigError as exc:
                log.error("reconfigure refused", node=self.name, source=source, error=exc.message)
                return pb.Reconfigured(daemon=self.name, error=exc.message)
            reload = plan(self.config, new, NODED, self._mine)
            self._apply(reload.config)
            self.config = reload.config
        live, restart = [str(c) for c in reload.live], [str(c) for c in reload.restart]
        said = {"applied": ", ".join(live), "needs_restart": ", ".join(restart)}
        log.info(
            "reconfigured" if reload.changed else "reconfigured: nothing changed",
            node=self.name,
            source=source,
            **{k: v for k, v in said.items() if v},
        )
        if restart:  # changed in the file, not applied: the operator must know
            log.warning("reconfigure: needs a restart", node=self.name, keys=", ".join(restart))
        if any(c.section == "nodes" and c.kind == REMOVED for c in reload.live):
            log.warning(
                "this node is no longer in the config: ctld refuses its registration "
                "(stop this noded)",
                node=self.name,
            )
        return pb.Reconfigured(daemon=self.name, applied=live, restart=restart)

    def _apply(self, config: ClusterConfig) -> None:
        """What noded reads of ``config`` after its start, in place (no await)."""
        old = self.config
        launcher, steps = self.launcher, self.steps
        launcher.noded = steps.noded = config.noded  # prolog, epilog, their timeouts, ...
        launcher.idle = steps.idle = config.idle_gpus
        if isinstance(launcher.launch_path, BatchStarter):  # PATH, checkpoint_dir
            launcher.launch_path.config = config.noded
        launcher.machine.config = dataclasses.replace(
            launcher.machine.config,
            prolog=bool(config.noded.prolog),
            epilog=bool(config.noded.epilog),
            idle_window_s=config.idle_gpus.window_s,
            idle_threshold_pct=config.idle_gpus.threshold_pct,
            progress_timeout_s=config.noded.progress_timeout_s,
        )
        if config.noded.log_level != old.noded.log_level:
            set_level(config.noded.log_level)  # else --log-level's stays
