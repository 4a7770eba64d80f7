"""A local cluster of real processes: what ``corral up`` and ``corral down`` run, and
what the test harness (corral/testing) and bench/ build their clusters with.

- ``layout``: a cluster's state directory, ports, addresses, socket, certificates,
  JWT key and clients; ``configfile``: its corral.toml and env.sh;
- ``cluster``: ``LocalCluster``, which starts and stops ctld and the nodes (noded
  processes, on loopback or in network namespaces: ``netns``; or in podman containers
  of corral's image in those namespaces: ``containers``; or the node simulator:
  ``simnodes``) and injects faults;
- ``pidfiles``: stopping a cluster by its state directory alone (``corral down``);
- ``sockets``: ctld's socket in a directory no other user can have made.

No test code here: corral/testing imports this package, never the other way round.
"""

from corral.localcluster.cluster import LocalCluster
from corral.localcluster.layout import DEFAULT_GPU_MODEL, ctld_name, free_port
from corral.localcluster.pidfiles import daemon_names, stop_state_dir

__all__ = [
    "DEFAULT_GPU_MODEL",
    "LocalCluster",
    "ctld_name",
    "daemon_names",
    "free_port",
    "stop_state_dir",
]
