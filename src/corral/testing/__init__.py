"""Test harness shipped with corral: real daemons on loopback (see cluster.py)."""

from corral.testing.cluster import LocalCluster, free_port, stop_state_dir

__all__ = ["LocalCluster", "free_port", "stop_state_dir"]
