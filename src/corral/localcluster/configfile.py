"""The text of a local cluster's corral.toml and env.sh, from its layout."""

from __future__ import annotations

import hashlib
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from corral.localcluster.layout import Layout


def config_text(self: Layout) -> str:
    """corral.toml for this layout (its ports chosen first: Layout.write_config)."""
    tls = f'\n[tls]\ndir = "{self.tls_dir}"\n' if self.tls else ""
    if self.tls and self.tls_clients:
        tls += "clients = true\n"
    munge = f'munge_socket = "{self.munge_socket}"\n' if self.munge_socket else ""
    nodes_expr = f"node[{self.node_names[0][4:]}-{self.node_names[-1][4:]}]"
    # with a standby, controller.hosts names every controller (host alone is refused)
    host_line = f'host = "{self.controller_host}"\n' if self.controllers == 1 else ""
    gpus = ""
    if self.gpu_backend == "nvml":
        gpus = f'gpus = {{ backend = "nvml", shards_per_gpu = {self.shards_per_gpu} }}\n'
    elif self.gpus_per_node:
        gpus = (
            f'gpus = {{ backend = "fake", count = {self.gpus_per_node}, '
            f'model = "{self.gpu_model}", shards_per_gpu = {self.shards_per_gpu} }}\n'
        )
    return f"""# Written by corral's LocalCluster; a local test cluster on loopback.
cluster_name = "{self.cluster_name}"

[controller]
{host_line}grpc_port = {self.grpc_port}
http_port = {self.http_port}
node_port = {self.node_port}
socket = "{self.socket}"
user = "{self.user}"
state_dir = "{self.ctld_dir}"
store_url = "{self.store_url}"
kill_wait_s = {self.kill_wait_s}
sched_interval_s = 2.0
metrics_token_file = "{self.metrics_token_path}"
{hosts_config(self)}{self.controller_config}

[auth]
type = "{self.auth_type}"
jwt_key = "{self.jwt_key_path}"
{munge}{tls}
[heartbeat]
interval_s = {self.heartbeat_interval_s}
timeout_s = {self.heartbeat_timeout_s}
{self.heartbeat_config}
[noded]
port = 0
step_port = 0
stream_port = 0
spool_dir = "{self.state_dir / "spool"}"
# one cgroup tree per local cluster, so clusters side by side never share one
cgroup_root = "corral-{hashlib.sha1(str(self.state_dir).encode()).hexdigest()[:10]}"
sample_interval_s = {self.sample_interval_s}
health_interval_s = {min(self.sample_interval_s, 1.0)}
{self.noded_config}

[[nodes]]
names = "{nodes_expr}"
cpus = {self.cpus_per_node}
memory_mb = {self.memory_mb_per_node}
{gpus}
[[partitions]]
name = "debug"
nodes = "{nodes_expr}"
default = true
max_time = "1-00:00:00"
{self.extra_config}"""


def hosts_config(self: Layout) -> str:
    """controller.hosts, when there is a standby: each on ports of its own."""
    if self.controllers == 1:
        return ""
    entries = []
    for i in range(self.controllers):
        grpc_port, http_port, node_port = self.controller_ports(i)
        entries.append(
            f'  {{ host = "{self.controller_host}", grpc_port = {grpc_port}, '
            f"http_port = {http_port}, node_port = {node_port}, "
            f'socket = "{self.local_socket(i)}" }},\n'
        )
    return f"lease_s = {self.lease_s}\nhosts = [\n{''.join(entries)}]\n"


def env_sh_text(self: Layout) -> str:
    """env.sh: source it to point the commands at this cluster."""
    bindir = Path(self.python).parent
    return (
        f"# source this to point the corral commands at the cluster in {self.state_dir}\n"
        f"export CORRAL_CONF={self.config_path}\n"
        f"export CORRAL_CTLD_HTTP={self.http_addresses}\n"
        f"export CORRAL_CTLD_SOCKET={self.sockets}\n"
        f"export CORRAL_CTLD_GRPC={self.grpc_addresses}\n"
        f"export CORRAL_CTLD_USER={self.user}\n"
        f'export PATH="{bindir}:$PATH"\n'
        "hash -r 2>/dev/null  # a shell that ran Slurm's sbatch must not keep using it\n"
        f'if [ "$(command -v sbatch)" != "{bindir}/sbatch" ]; then\n'
        "  echo \"warning: sbatch here is '$(command -v sbatch)', not corral's "
        f"({bindir}/sbatch): an alias or function shadows it "
        '(unalias sbatch; unset -f sbatch)" >&2\n'
        "fi\n"
    )
