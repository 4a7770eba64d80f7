"""corral: the operator's command (local clusters, the daemons in the foreground).

corral up [--nodes N] [--gpus-per-node G] [--state-dir DIR]   start a local cluster
corral up --gpus auto|nvml|fake [...]                         ... on this machine's real GPUs
corral up --simulated-nodes N [...]                           ... whose N nodes are simulated
corral down [--state-dir DIR]                                 stop exactly that cluster
corral ctld [ctld options]                                    run the controller
corral noded [noded options]                                  run a node agent
corral why JOBID|NODE                                         why a job is pending, a node out
corral history JOBID|NODE                                     a job's story, a node's changes
corral web-login                                              a one-time URL to the web page
corral certs [--dir DIR]                                      the cluster CA and certificates
corral certs --revoke NAME [--dir DIR]                        revoke a daemon's certificate
corral token --user U [--lifetime 7d]                         a JWT for a user (admins)
corral sim TRACE [--policy P] [--jobs N] [--procs N]          replay an SWF trace
corral sim --from-store [CONFIG|URL] [--set KEY=VALUE]        what-if on the site's own history
corral db upgrade|current [-f CONFIG] [--url URL]            migrate the store's schema
corral db backup|restore FILE [-f CONFIG] [--url URL]        back the store up, restore it
corral db verify FILE | corral db check                      a backup's, the store's soundness
corral launchers [--dir DIR]                                  fast-starting Slurm commands
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from client.common import run
from corral import __version__
from corral.errors import CorralError, InvalidOption

PROG = "corral"
DEFAULT_STATE_DIR = os.path.join(os.path.expanduser("~"), ".corral", "local")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise InvalidOption(message)


def _exec_daemon(module: str, argv: list[str]) -> int:
    # the daemons are separate programs: exec keeps the pid (for systemd) and keeps the
    # client from importing them (the dependency rule)
    os.execv(sys.executable, [sys.executable, "-m", module, *argv])


def _up(args: argparse.Namespace) -> int:
    from corral.localcluster import LocalCluster, daemon_names

    state_dir = Path(args.state_dir).resolve()
    if any(True for _ in daemon_names(state_dir)):
        raise CorralError(
            f"a cluster already runs from {state_dir} (corral down --state-dir {state_dir} first)"
        )
    simulated = args.simulated_nodes is not None
    backend = _gpu_backend(args, simulated)
    if simulated:
        if args.simulated_nodes < 1 or args.simulated_nodes > 12500:
            raise InvalidOption("--simulated-nodes must be between 1 and 12500")
        args.nodes = args.simulated_nodes
    elif args.nodes < 1 or args.nodes > 250:
        raise InvalidOption("--nodes must be between 1 and 250 (one loopback address each)")
    cluster = LocalCluster(
        state_dir,
        nodes=args.nodes,
        simulated=simulated,
        # a thousand simulated nodes beating every 2 s would be most of ctld's work
        heartbeat_interval_s=10.0 if simulated else 2.0,
        heartbeat_timeout_s=60.0 if simulated else 10.0,
        gpus_per_node=args.gpus_per_node,
        cpus_per_node=args.cpus_per_node,
        memory_mb_per_node=args.mem_per_node_mb,
        cluster_name=args.cluster_name,
        isolation="loopback" if simulated else args.isolation,
        gpu_backend=backend,
        shards_per_gpu=args.shards_per_gpu,
        extra_config=_extra_config(args.extra_config),
    )
    if cluster.isolation_note:
        print(f"corral: {cluster.isolation_note}")
    blocked = unreachable_by_others()
    if blocked:
        sys.stderr.write(f"corral: warning: {blocked}\n")
    cluster.start()
    for proc in cluster.procs.values():
        proc.returncode = 0  # detach: the daemons outlive this command by design
    print(
        f"corral: cluster {args.cluster_name!r} is up in {state_dir}: ctld on "
        f"{cluster.http_address} (HTTP) and {cluster.controller_host}:{cluster.grpc_port} "
        f"(gRPC), {args.nodes} {'simulated ' if simulated else ''}node(s) with "
        + (
            f"this machine's {args.gpus_per_node} real GPU(s) (NVML)"
            if backend == "nvml"
            else f"{args.gpus_per_node} fake GPU(s) each"
        )
    )
    print(
        f'corral: metrics: curl -H "Authorization: Bearer $(cat {cluster.metrics_token_path})" '
        f"{cluster.metrics_url()}"
    )
    if simulated:
        print(
            "corral: simulated nodes run no processes: a job lasts its '#SIM runtime=S' "
            "line or first 'sleep S' (else 1 s); see python -m corral.localcluster.simnodes -h"
        )
    if cluster.containers is not None:
        print(
            f"corral: each node a container of {cluster.containers.image} "
            f"({cluster.containers.name(0)}, ...); enter one with "
            f"podman exec -it {cluster.containers.name(0)} bash"
        )
    elif cluster.network is not None:
        net = cluster.network
        print(
            f"corral: each node in its own network namespace ({net.namespace(0)}, ...) on "
            f"bridge {net.bridge}: {cluster.node_address(0)}, ...; enter one with "
            f"nsenter --net=/var/run/netns/{net.namespace(0)} bash"
        )
    print(f"To use it:  source {cluster.env_path}")
    print(f"To stop it: corral down --state-dir {state_dir}")
    return 0


def _gpu_backend(args: argparse.Namespace, simulated: bool) -> str:
    """``--gpus``: "nvml" (this machine's GPUs, one node) or "fake"; says which, and why."""
    if args.gpus == "fake":
        return "fake"
    if simulated:
        raise InvalidOption(f"--gpus {args.gpus}: simulated nodes have fake GPUs only")
    from corral.gpuprobe import probe_nvml

    found = probe_nvml()
    if not found.count:
        if args.gpus == "nvml":
            raise CorralError(f"--gpus nvml: no GPU to use: {found.why_not}")
        print(
            f"corral: --gpus auto: no NVIDIA GPU found ({found.why_not}): "
            f"{args.gpus_per_node} fake GPU(s) per node instead"
        )
        return "fake"
    if args.nodes_given and args.nodes != 1:
        raise InvalidOption(
            f"--gpus {args.gpus}: this machine's GPUs make one node (--nodes 1); "
            f"{args.nodes} nodes would share the same GPUs"
        )
    args.nodes, args.gpus_per_node = 1, found.count
    print(
        f"corral: --gpus {args.gpus}: NVML found {found.count} x {found.model} "
        f"(driver {found.driver}): one node with this machine's GPUs, CPUs and memory"
    )
    if not args.cpus_given:
        args.cpus_per_node = 0  # noded finds the machine's own
    if not args.mem_given:
        args.mem_per_node_mb = 0
    if args.isolation == "auto":
        args.isolation = "loopback"  # one node: no namespaces needed
    return "nvml"


def _extra_config(path: str | None) -> str:
    """``--extra-config FILE``: TOML tables appended to the cluster's config."""
    if not path:
        return ""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InvalidOption(f"--extra-config {path}: {exc.strerror}") from None
    import tomllib

    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidOption(f"--extra-config {path}: not valid TOML: {exc}") from None
    return "\n" + text


def unreachable_by_others() -> str:
    """Why other users cannot run this environment's Python ("" when they can). Only
    root's jobs run as other users; theirs run srun, scontrol and the tools from it."""
    if os.geteuid() != 0:
        return ""
    import stat

    paths = dict.fromkeys([sys.executable, os.path.realpath(sys.executable), sys.prefix])
    for path in paths:
        parts = Path(path).parts
        for depth in range(2, len(parts) + 1):
            part = Path(*parts[:depth])
            try:
                mode = os.stat(part).st_mode
            except OSError:
                break
            if not mode & stat.S_IXOTH:
                return (
                    f"other users cannot run this environment's Python ({sys.executable}): "
                    f"{part} is mode {stat.S_IMODE(mode):04o}, not searchable by them. Jobs "
                    "run as their users, and the commands they call (srun, scontrol, "
                    "submitit's) would fail. Make the environment from a Python every user "
                    "can run, somewhere every user can enter (python3 -m venv "
                    f"/opt/corral/venv), or chmod o+x {part}"
                )
    return ""


def _down(args: argparse.Namespace) -> int:
    from corral.localcluster import stop_state_dir

    state_dir = Path(args.state_dir).resolve()
    stopped = stop_state_dir(state_dir)
    if not stopped:
        print(f"corral: nothing was running from {state_dir}")
    else:
        print(f"corral: stopped {', '.join(stopped)}")
    return 0


def _status() -> int:
    """Each controller: its role (primary, or backup in standby), up or down; what the
    primary says of itself. Exit 1 when no primary answers."""
    from client.ping import labels, ping_all
    from corral.rest import ENV_HINT
    from corral.slurmfmt import format_timestamp

    pinged = ping_all()
    width = max(len("CONTROLLER"), *(len(p.name) for p in pinged))
    print(f"{'CONTROLLER':<{width}}  {'ROLE':<8}  STATE  DETAIL")
    for label, p in zip(labels(pinged), pinged, strict=True):
        role = label if p.up else "-"
        if p.primary and p.info:
            since = format_timestamp(float(p.info.get("startTime", 0)))
            detail = (
                f"cluster {p.info.get('cluster', '')}, corral {p.info.get('version', '')}, "
                f"primary since {since}, next job id {p.info.get('nextJobId', '')}"
            )
        else:
            detail = p.detail.removesuffix(ENV_HINT)
        print(f"{p.name:<{width}}  {role:<8}  {'UP' if p.up else 'DOWN':<5}  {detail}")
    return 0 if any(p.primary for p in pinged) else 1


def main_args(argv: list[str]) -> int:
    if argv and argv[0] in ("ctld", "noded"):
        return _exec_daemon(argv[0], argv[1:])
    if argv and argv[0] == "sim":
        return _exec_daemon("ctld.sim", argv[1:])  # the simulator runs ctld's own core
    if argv and argv[0] == "db":
        return _exec_daemon("ctld.db", argv[1:])  # the store's schema is ctld's
    if argv and argv[0] == "why":
        from client.why import main_args as why

        return why(argv[1:])
    if argv and argv[0] == "history":
        from client.history import main_args as history

        return history(argv[1:])
    if argv and argv[0] == "web-login":
        from client.weblogin import main_args as web_login

        return web_login(argv[1:])
    if argv and argv[0] == "report":
        from client.report import main_args as report

        return report(argv[1:])
    if argv and argv[0] == "launchers":
        from client.launchers import main_args as launchers

        return launchers(argv[1:])
    p = _Parser(prog=PROG, description="corral operator command")
    p.add_argument("--version", action="version", version=f"corral {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a local cluster (ctld + N noded, SQLite)")
    up.add_argument("--nodes", type=int, default=None, help="nodes (default 2)")
    up.add_argument(
        "--simulated-nodes",
        type=int,
        metavar="N",
        help="N simulated nodes (one process plays them all over the real protocol)",
    )
    up.add_argument("--gpus-per-node", type=int, default=8, help="fake GPUs per node")
    up.add_argument(
        "--gpus",
        choices=("auto", "nvml", "fake"),
        default="fake",
        help="nvml: this machine's GPUs (one node); auto: nvml when NVML finds GPUs, else "
        "fake; fake: --gpus-per-node fake GPUs per node (default)",
    )
    up.add_argument("--shards-per-gpu", type=int, default=0, help="gres/shard per GPU")
    up.add_argument("--cpus-per-node", type=int, default=None, help="default 16")
    up.add_argument("--mem-per-node-mb", type=int, default=None, help="default 65536")
    up.add_argument(
        "--extra-config", metavar="FILE", help="TOML tables to add to the config ([mail], ...)"
    )
    up.add_argument("--cluster-name", default="corral")
    up.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    up.add_argument(
        "--isolation",
        choices=("auto", "netns", "container", "loopback"),
        default="auto",
        help="nodes in network namespaces (root) or on 127.0.0.x; auto: namespaces if root; "
        "container: each node a podman container from corral's image (scripts/build-image.sh)",
    )
    sub.add_parser("status", help="the controllers: which is primary, which are up")
    down = sub.add_parser("down", help="stop the local cluster of a state dir")
    down.add_argument("--state-dir", default=DEFAULT_STATE_DIR)
    sub.add_parser("ctld", help="run the controller in the foreground (see corral ctld -h)")
    sub.add_parser("noded", help="run a node agent in the foreground (see corral noded -h)")
    sub.add_parser("why", help="why a job is pending, or a node out: corral why JOBID|NODE")
    sub.add_parser("history", help="a job's story, a node's changes: corral history JOBID|NODE")
    sub.add_parser("report", help="GPU-hours per account per day: corral report [--plot F]")
    sub.add_parser("web-login", help="a one-time URL that signs you in to the web page")
    sub.add_parser("sim", help="replay a workload trace through the scheduler (corral sim -h)")
    sub.add_parser(
        "db", help="the store: corral db upgrade|current|backup|restore|verify|check (-h)"
    )
    sub.add_parser("launchers", help="the Slurm commands started without site (python -IS)")
    from client.credentials import add_parsers, certs, token

    add_parsers(sub)
    args = p.parse_args(argv)
    if args.command == "up":
        args.nodes_given = args.nodes is not None
        args.cpus_given = args.cpus_per_node is not None
        args.mem_given = args.mem_per_node_mb is not None
        args.nodes = 2 if args.nodes is None else args.nodes
        args.cpus_per_node = 16 if args.cpus_per_node is None else args.cpus_per_node
        args.mem_per_node_mb = 64 * 1024 if args.mem_per_node_mb is None else args.mem_per_node_mb
        return _up(args)
    if args.command == "certs":
        return certs(args)
    if args.command == "token":
        return token(args)
    if args.command == "status":
        return _status()
    return _down(args)


def main() -> None:
    run(PROG, lambda: main_args(sys.argv[1:]))


if __name__ == "__main__":
    main()
