"""``scontrol reconfigure`` and SIGHUP: ctld reads its config file again and applies what
changed, without a restart (docs/admin-guide.md#reconfigure).

One path, in order, under the accounting database's lock (sacctmgr's changes and a
reconfigure one at a time):

1. read and validate the whole file (``load_config``): a file that does not parse or
   validate is refused with the reason, and nothing changes;
2. the plan (``corral.config.reload``): the changes by key, each live or restart-only;
   the restart-only ones keep their running value and are reported by key;
3. what a running ctld refuses: a node removed while it holds jobs (drain it and let
   them end first: running jobs are never touched by a reconfigure), or while it is
   being powered up or down, or that a reservation names; a new config node named as
   a dynamic node that joined;
4. ``reconfig_apply.prepare`` makes what the new config needs (may fail: nothing
   changed yet), then applies it at once on the event loop;
5. pending jobs none of whose partitions is left end NODE_FAIL (reason NodeDown), as
   Slurm's reconfigure ends them; a pending job with one left keeps waiting, and the
   next pass judges every pending job against the new config;
6. each registered node's noded is asked to do the same with its own file (its answer,
   or why there is none, is part of the reply).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import structlog

from corral import hostlist
from corral.config import ClusterConfig, load_config
from corral.config.keyclasses import CTLD
from corral.config.reload import Reload, plan
from corral.errors import ConfigError, CorralError
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from ctld.control.reconfig_apply import prepare, running_config
from ctld.core.commit import Change
from ctld.core.state import StoredNodes
from ctld.model import jobstate as js
from ctld.model.nodes import POWER_ON, POWERING_DOWN, POWERING_UP, NodeRecord

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ctld.control.cluster import Cluster

log = structlog.get_logger("ctld")

ROOT = Identity("root", 0, 0)  # SIGHUP: whoever may signal ctld is root (or ctld's user)
NODE_CALLS = 32  # nodes asked at once


class Reconfigurer:
    def __init__(
        self,
        cluster: Cluster,
        file_config: ClusterConfig,
        *,
        loader: Callable[[str], ClusterConfig] = load_config,
    ) -> None:
        self.cluster = cluster
        # the file's config as ctld runs it (restart-only keys at their running values):
        # what the next reconfigure compares the file with
        self.file_config = file_config
        # which of controller.hosts this ctld is (server.py): the file is read as it sees it
        self.controller_index = 0
        self.loader = loader

    async def reconfigure(self, who: Identity, *, source: str) -> pb.ReconfigureResponse:
        """Read the file again and apply it; ``source`` (scontrol, SIGHUP) is logged."""
        self.cluster.policy.check_admin(who, "reconfigure")
        async with self.cluster.accounting_ops.lock:
            try:
                reload = await self._plan()
                self._refuse(reload)
                if reload.config != self.file_config:  # keys ctld does not read too
                    await self._apply(reload)
            except CorralError as exc:
                log.error("reconfigure refused", source=source, user=who.user, error=exc.message)
                raise
            ended = await self._end_orphans(source)
        live, restart = [str(c) for c in reload.live], [str(c) for c in reload.restart]
        said = {"applied": ", ".join(live), "needs_restart": ", ".join(restart)}
        said["ended_jobs"] = ",".join(str(j) for j in ended)
        log.info(
            "reconfigured" if reload.changed else "reconfigured: nothing changed",
            source=source,
            user=who.user,
            **{k: v for k, v in said.items() if v},
        )
        if restart:  # changed in the file, not applied: the operator must know
            log.warning("reconfigure: needs a restart", keys=", ".join(restart))
        nodes = await self._ask_nodes()
        return pb.ReconfigureResponse(
            ctld=pb.Reconfigured(daemon="ctld", applied=live, restart=restart),
            ended_job_ids=ended,
            nodes=nodes,
        )

    async def _plan(self) -> Reload:
        new = await asyncio.to_thread(self.loader, self.file_config.source)
        # as server.py made it: this controller's own address (one of controller.hosts)
        index = min(self.controller_index, len(new.controller.controllers) - 1)
        ctl = new.controller.as_controller(index)
        return plan(self.file_config, dataclasses.replace(new, controller=ctl), CTLD)

    def _refuse(self, reload: Reload) -> None:
        """What a running ctld does not take, as a ConfigError naming it."""
        st = self.cluster.state
        wanted = set(reload.config.node_names)
        gone = [n for n in st.nodes.values() if not n.dynamic and n.name not in wanted]
        busy = [n for n in gone if n.job_ids]
        if busy:
            node = busy[0]
            jobs = ",".join(str(j) for j in sorted(node.job_ids))
            raise ConfigError(
                f"node {node.name} is removed from the config but runs job(s) {jobs}: drain "
                f"it (scontrol update NodeName={node.name} State=DRAIN Reason=...), let its "
                "jobs end, then reconfigure"
            )
        moving = [n for n in gone if n.power in (POWERING_UP, POWERING_DOWN)]
        if moving:  # its power program is running and will report on it
            raise ConfigError(
                f"node {moving[0].name} is removed from the config but is being powered "
                "up or down: reconfigure once it is on or off"
            )
        now = st.clock()
        for resv in st.reservations.by_name.values():
            held = set(hostlist.expand(resv.nodes)) if resv.nodes else set()
            named = sorted(held & {n.name for n in gone})
            if named and resv.end_time > now:
                raise ConfigError(
                    f"node {named[0]} is removed from the config but reservation "
                    f"{resv.name} holds it: delete or update the reservation first"
                )
        dynamic = sorted(n.name for n in st.nodes.values() if n.dynamic and n.name in wanted)
        if dynamic:
            raise ConfigError(
                f"node {dynamic[0]} is in [[nodes]] but joined as a dynamic node: it becomes "
                "a node of the config only at ctld's restart"
            )

    async def _apply(self, reload: Reload) -> None:
        """Make what ``reload``'s config needs, then apply it in one go."""
        st = self.cluster.state
        config = running_config(st, reload.config)
        added = [n for n in config.node_names if n not in st.nodes]
        rows = await asyncio.to_thread(st.store.load_accounting)
        kept = await asyncio.to_thread(st.stored_nodes) if added else StoredNodes()
        apply = prepare(self.cluster, config, rows, kept)
        # nothing above changed ctld; from here to the end, no await: all at once
        apply()
        self.file_config = reload.config
        self.cluster.config_applied()
        st.wake()  # pending jobs meet the new config at the next pass

    async def _end_orphans(self, source: str) -> list[int]:
        """Pending jobs none of whose partitions is left end NODE_FAIL (Slurm's
        reconfigure ends them so: reason NodeDown, exit code 1); their ids."""
        st = self.cluster.state
        names = {p.name for p in st.config.partitions}
        orphans = [
            job
            for i in list(st.index.pending)
            if (job := st.jobs.get(i)) is not None
            and job.state == js.PENDING
            and job.spec.partitions
            and not names & set(job.spec.partitions)
        ]
        if not orphans:
            return []
        now = st.clock()
        async with Change(st) as ch:
            for job in orphans:
                ch.transition(
                    job,
                    "partition_removed",
                    cause=f"reconfigure:{source}",
                    now=now,
                    detail=f"partition {','.join(job.spec.partitions)} removed from the config",
                    end_time=now,
                    reason="NodeDown",
                    exit_code=1,
                )
        for job in orphans:
            log.warning("job ended: its partition was removed", job_id=job.job_id)
        return [job.job_id for job in orphans]

    async def _ask_nodes(self) -> list[pb.Reconfigured]:
        """Each registered node's noded reconfigures with its own file; nodes sharing one
        agent (the node simulator) are asked once. Their answers, by node name."""
        groups: dict[str, list[NodeRecord]] = {}
        for node in self.cluster.state.nodes.values():
            if node.registered and node.responding and not node.down and node.power == POWER_ON:
                groups.setdefault(node.agent_address or node.address, []).append(node)
        gate = asyncio.Semaphore(NODE_CALLS)
        dispatcher = self.cluster.dispatcher

        async def ask(nodes: list[NodeRecord]) -> pb.Reconfigured:
            name = hostlist.compress([n.name for n in nodes])
            async with gate:
                try:
                    answer = await dispatcher.reconfigure(nodes[0])
                except CorralError as exc:
                    return pb.Reconfigured(daemon=name, error=exc.message)
            answer.daemon = name
            return answer

        return list(await asyncio.gather(*(ask(nodes) for nodes in groups.values())))
