"""Each config key's class, per daemon: applied by a reconfigure (``live``), only by a
restart (``restart``), or not read by that daemon (``unused``).

``scontrol reconfigure`` and SIGHUP apply the live keys that changed and report the
restart-only ones by key, unapplied (Slurm's rule: listening addresses, ports, the
state's place and the authentication's set-up need a restart). docs/config.md lists the
same table (tests/unit/test_reconfig_classes.py holds the two together, and every key
a diff can name in it).
"""

from __future__ import annotations

from collections.abc import Iterable

from corral.config.diff import Changed

LIVE, RESTART, UNUSED = "live", "restart", "unused"
CTLD, NODED = "ctld", "noded"

# a key pattern (corral/config/diff.py's, ``*`` for an entry's name) -> (ctld, noded);
# a pattern ending in ``.`` covers every key under it. The first match wins.
_L, _R, _U = LIVE, RESTART, UNUSED
CLASSES: tuple[tuple[str, tuple[str, str]], ...] = (
    ("cluster_name", (_R, _U)),
    # where ctld listens and keeps its state, and how the daemons find it
    ("controller.host", (_R, _R)),
    ("controller.hosts", (_R, _R)),
    ("controller.node_port", (_R, _R)),
    ("controller.listen", (_R, _U)),
    ("controller.grpc_port", (_R, _U)),
    ("controller.http_port", (_R, _U)),
    ("controller.socket", (_R, _U)),
    ("controller.user", (_R, _U)),
    ("controller.metrics_port", (_R, _U)),
    ("controller.state_dir", (_R, _U)),
    ("controller.store_url", (_R, _U)),
    ("controller.sqlite_synchronous", (_R, _U)),
    ("controller.log_json", (_R, _U)),
    ("controller.lease_s", (_R, _U)),
    ("controller.metrics_token_file", (_R, _U)),  # read once, as TLS and auth files are
    ("controller.", (_L, _U)),
    # noded's self-fence guard and its witness run with the deadline they started with
    # (timeout - interval; a noded takes ctld's interval at its next registration)
    ("heartbeat.interval_s", (_L, _R)),
    ("heartbeat.timeout_s", (_L, _R)),
    ("heartbeat.hold_fraction", (_L, _U)),
    ("noded.listen", (_U, _R)),
    ("noded.port", (_U, _R)),
    ("noded.step_port", (_U, _R)),
    ("noded.stream_port", (_U, _R)),
    ("noded.spool_dir", (_U, _R)),
    ("noded.log_json", (_U, _R)),
    ("noded.cgroups", (_U, _R)),
    ("noded.cgroup_root", (_U, _R)),
    ("noded.self_fence", (_U, _R)),
    ("noded.", (_U, _L)),
    # the start-at-submit path is wired when ctld starts (ctld/control/cluster.py)
    ("scheduler.start_on_submit", (_R, _U)),
    ("scheduler.", (_L, _U)),
    ("priority.", (_L, _U)),
    ("idle_gpus.action", (_L, _U)),
    ("idle_gpus.", (_L, _L)),
    ("web.", (_R, _U)),
    ("auth.", (_R, _U)),
    ("tls.", (_R, _R)),
    ("mail.", (_L, _U)),
    ("containers.allowed_sources", (_L, _U)),
    ("containers.", (_U, _R)),
    ("power.", (_L, _U)),
    # a dynamic node's GPUs are what its noded discovered when it started
    ("dynamic_nodes.gpus.", (_R, _R)),
    ("dynamic_nodes.", (_L, _U)),
    # a node added or removed; its size and GPUs are its noded's discovery, at its start
    ("nodes.*", (_L, _L)),
    ("nodes.*.suspend_time", (_L, _U)),
    ("nodes.*.", (_R, _R)),
    ("partitions", (_L, _U)),
    ("partitions.", (_L, _U)),
    ("qos.", (_L, _U)),
    ("accounts.", (_L, _U)),
)


def class_of(pattern: str, daemon: str) -> str:
    """The class of key ``pattern`` for ``daemon`` (``ctld`` or ``noded``)."""
    column = 0 if daemon == CTLD else 1
    for prefix, classes in CLASSES:
        if pattern == prefix or (prefix.endswith(".") and pattern.startswith(prefix)):
            return classes[column]
    raise KeyError(f"{pattern}: no reconfigure class (corral/config/keyclasses.py)")


def classify(changes: Iterable[Changed], daemon: str) -> tuple[list[Changed], list[Changed]]:
    """``changes`` that ``daemon`` applies live, and those that need its restart (keys
    it does not read are in neither)."""
    live: list[Changed] = []
    restart: list[Changed] = []
    for change in changes:
        kind = class_of(change.pattern, daemon)
        if kind == LIVE:
            live.append(change)
        elif kind == RESTART:
            restart.append(change)
    return live, restart
