"""A node simulator: one process that plays many nodes over the real protocol.

Each simulated node registers with ctld, heartbeats, accepts ``LaunchJob`` and
``SignalJob`` on the simulator's NodeAgent server, "runs" each job for its scripted
time and reports its exit and usage through a per-node outbox, exactly as noded does.
Nothing is forked: a job is a timer. So one machine can drive ctld as a 1,000-node x
8-GPU cluster (tests that need more than a few nodes, bench/, ``corral up
--simulated-nodes N``). ctld is the real one; only the nodes are pretend.

How long a job runs and how it ends, first match wins:

- ``#SIM runtime=SECONDS exit=CODE rss_mb=N gpu_util=PCT`` anywhere in the script
  (any subset of the keys);
- ``CORRAL_SIM_RUNTIME`` / ``CORRAL_SIM_EXIT`` in the job's environment;
- the first ``sleep N`` in the script (so ``sbatch --wrap 'sleep 5'`` takes 5 s);
- the simulator's default runtime.

A job that would run past its time limit ends at the limit as TIMEOUT. ``SignalJob``
with ``terminate`` (scancel) ends it at once; SIGINT/SIGTERM/SIGKILL end it with that
signal; other signals are delivered to nothing and the job keeps running.

The simulator also checks what a real node would feel: a launch that would give a
node more CPUs, memory or GPUs than it has, or a GPU another job holds, is counted
as an oversubscription (``stats()``), so tests can assert ctld never does it.

Each run of a job is its own (its exit is reported with its run number), and a node
that registers kills the jobs ctld no longer places there (``keep_job_ids``: those
requeued while it was DOWN), as noded fences. While ctld is away the nodes keep their
jobs and retry their beats (0.2 s doubling to 5 s; the channel reconnects within 2 s,
as noded's), then register with them.

Failure on command (``crash``, ``revive``, ``fault``): a crashed node stops
heartbeating and answering, and forgets its jobs (as a noded restart would); a revived
one registers again; a fault is a health event (GPU XID, ...) that ctld drains the
node for. Run as a process, commands arrive as JSON lines on a Unix socket
(``--control``); see ``control()``.

All nodes share one NodeAgent server (one port): ctld's requests name their job, and
the simulator knows which nodes each job holds.

Modules: ``script`` (what a job's script says it does), ``nodes`` (each node's
resources and what its jobs hold), ``simulator`` (``SimulatedNodes``: jobs, the link
to ctld, failures on command, the shared NodeAgent servicer), ``process`` (as a
process: the control socket, ``python -m corral.localcluster.simnodes``).
"""

from corral.localcluster.simnodes.script import Script, parse_script
from corral.localcluster.simnodes.simulator import SimulatedNodes

__all__ = ["Script", "SimulatedNodes", "parse_script"]
