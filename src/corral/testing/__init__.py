"""Test harness shipped with corral, one helper API (harness.py) in two modes:

- ``LocalCluster`` (cluster.py): real ctld and noded processes on loopback or in
  network namespaces; ``corral up``, the integration tests and bench/ use it.
- ``InProcessCluster`` (inprocess.py): ctld's real store and state machine in this
  process, a recording dispatcher and a manual clock; imported on demand (it imports
  ctld and protobuf).

Pytest fixtures for both: corral/testing/fixtures.py. ``wait_for`` is the one poll.
"""

from corral.testing.cluster import LocalCluster, free_port, stop_state_dir
from corral.testing.harness import Harness, wait_for

__all__ = ["Harness", "LocalCluster", "free_port", "stop_state_dir", "wait_for"]
