"""Test harness shipped with corral, one helper API (harness.py) in two modes:

- ``LocalCluster`` (cluster.py): corral/localcluster's real ctld and noded processes
  (on loopback, in network namespaces, or with simulated nodes) with the helper API;
  ``ClusterFactory`` starts any number of them. The integration tests and bench/ use it
  (``corral up`` uses corral/localcluster itself, not this package).
- ``InProcessCluster`` (inprocess.py): ctld's real store and state machine in this
  process, a recording dispatcher and the manual clock of corral/clock.py; with
  ``make_cluster``/``register_all`` for the async unit tests that drive ctld's Cluster
  directly. Imported on demand (it imports ctld and protobuf).

Pytest fixtures for both: corral/testing/fixtures.py (a plugin; tests/conftest.py
loads it and redefines none). ``wait_for`` is the one poll. Nothing under src/ but
this package imports it (tests/unit/test_dependency_rule.py).
"""

from corral.testing.cluster import LocalCluster, free_port, stop_state_dir
from corral.testing.harness import Harness, wait_for

__all__ = ["Harness", "LocalCluster", "free_port", "stop_state_dir", "wait_for"]
