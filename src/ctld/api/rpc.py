"""RPC handlers: thin adapters from requests to Cluster operations.

``ControllerApi`` holds the Controller methods, independent of transport: the gRPC
servicer and the HTTP/JSON gateway both call it with a parsed request and the
caller's metadata, so the two transports cannot drift apart. Errors leave as
CorralError; each transport maps them with the class's own ``grpc_code`` or
``http_status``. Both services are registered from the generated method table
(corral/wire/methods.py): one handler per RPC, found by its Python name
(ctld/api/grpc_service.py: the gRPC side).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from google.protobuf.message import Message

from corral import __version__, limits
from corral.errors import (
    InvalidJobId,
    InvalidRequest,
    PermissionDenied,
    Unauthenticated,
)
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from corral.wire.methods import CONTROLLER, NODE_CONTROLLER, PYTHON_NAMES, SERVICES
from ctld.api import batch_scripts, step_views, usage_report
from ctld.api.auth import Authenticator, Caller, StepCredentials
from ctld.api.jobs_json import JobsJson, dumps
from ctld.api.reads import Reads
from ctld.codec import fieldmask
from ctld.codec.jsonmap import Skip, message_to_json
from ctld.control.cluster import Cluster
from ctld.control.versions import CommandVersions

log = structlog.get_logger("ctld.api.rpc")

Handler = Callable[[Any, Identity], Awaitable[Message]]

# Requests that change state: refused up front while the store is down, before anything
# changes in memory. Reports of what already happened (a step or an allocation that
# ended, node reports) still go through: memory follows the facts, and the store
# catches up when it returns.
_CHANGES = frozenset(
    {
        "SubmitJob",
        "CancelJobs",
        "UpdateJob",
        "CreateReservation",
        "UpdateReservation",
        "DeleteReservation",
        "UpdateNode",
        "CreateStep",
        "Reconfigure",
    }
)

_NO_SKIP: Skip = {}
MAX_BEATS = 20_000  # nodes in one HeartbeatBatch


class ControllerApi:
    """The Controller service, as plain async methods (request, identity) -> response."""

    def __init__(
        self, cluster: Cluster, auth: Authenticator, steps: StepCredentials | None = None
    ) -> None:
        self.cluster = cluster
        self.auth = auth
        self.step_credentials = steps or StepCredentials()
        self.jobs_json = JobsJson(cluster)
        self.reads = Reads(cluster)  # the selections the web page reads through too
        self.versions = CommandVersions()  # a newer major refused, others judged
        # the web page's one-time logins (ctld/web); None: ctld serves no web page
        self.web_login: Callable[[Identity], pb.CreateWebLoginResponse] | None = None
        # one handler per RPC of the generated table (a missing one fails here, at start)
        self.methods: dict[str, tuple[type[Message], Handler]] = {
            name: (getattr(pb, req), getattr(self, PYTHON_NAMES[name]))
            for name, (req, _resp, _cs, _ss) in SERVICES[CONTROLLER].items()
        }

    async def call(self, method: str, request: Message, caller: Caller) -> Message:
        who = self.identify(caller)
        limits.check(request)
        _, handler = self.methods[method]
        if method in _CHANGES:
            self.cluster.store.check_writable()
        mask = fieldmask.of_request(method, request)
        if mask is not None:  # answered whole (nodes: their masked fields), then masked
            resp = await handler(fieldmask.for_handler(method, request), who)
            return fieldmask.apply_to(method, mask, resp)
        return await handler(request, who)

    def identify(self, caller: Caller) -> Identity:
        """Who calls, from the transport alone (the gateway asks before reading a body);
        a command of a newer major version than ctld's is refused first."""
        self.versions.check(caller.metadata, caller.method)
        return self.auth.identify(caller)

    async def call_json(self, method: str, request: Message, who: Identity) -> bytes:
        """The reply as proto3 JSON text (for the gateway, which identified ``who``)."""
        limits.check(request)
        mask = fieldmask.of_request(method, request)
        if method == "GetJobs":
            assert isinstance(request, pb.GetJobsRequest)
            return self.get_jobs_json(request, who, mask)
        if method == "QueryAccounting":
            assert isinstance(request, pb.QueryAccountingRequest)
            return await self.query_accounting_json(request, who, mask)
        _, handler = self.methods[method]
        if method in _CHANGES:
            self.cluster.store.check_writable()
        if mask is None:
            return dumps(message_to_json(await handler(request, who)))
        resp = await handler(fieldmask.for_handler(method, request), who)
        skip = mask.skip(_NO_SKIP)  # the fields outside the mask, skipped as encoded
        if skip is None:
            return dumps(message_to_json(fieldmask.apply_to(method, mask, resp)))
        return dumps(message_to_json(resp, skip))

    def get_jobs_json(
        self, req: pb.GetJobsRequest, who: Identity, mask: fieldmask.FieldMask | None = None
    ) -> bytes:
        """GetJobs as JSON (``ctld/api/jobs_json.py``: each job encoded once per revision)."""
        return self.jobs_json.answer(
            req,
            who,
            mask,
            self.reads.visible_jobs(req.filter, who, after=req.after_job_id, limit=req.limit),
        )

    async def submit_job(self, req: pb.SubmitJobRequest, who: Identity) -> pb.SubmitJobResponse:
        if not req.HasField("spec"):
            raise InvalidRequest("SubmitJob needs a job spec")
        if req.test_only:
            trial, estimate = self.cluster.test_only(who, req.spec)
            return pb.SubmitJobResponse(
                job_id=trial.job_id, cluster=trial.cluster, estimate=estimate
            )
        job = await self.cluster.submit(who, req.spec)
        return pb.SubmitJobResponse(job_id=job.job_id, cluster=job.cluster)

    async def cancel_jobs(self, req: pb.CancelJobsRequest, who: Identity) -> pb.CancelJobsResponse:
        return pb.CancelJobsResponse(outcomes=await self.cluster.cancel(who, req))

    async def get_jobs(self, req: pb.GetJobsRequest, who: Identity) -> pb.GetJobsResponse:
        resp = pb.GetJobsResponse(now=self.cluster.clock())
        shown = self.reads.shown_jobs(
            req.filter, who, after=req.after_job_id, limit=req.limit, with_spec=req.with_spec
        )
        for job in shown:
            out = resp.jobs.add()
            out.CopyFrom(job)  # a copy: the owner's is ctld's own record
            if not req.with_events:
                del out.events[:]
            if not req.with_spec:
                out.spec.ClearField("script")
                out.spec.ClearField("environment")
        return resp

    async def query_accounting(
        self, req: pb.QueryAccountingRequest, who: Identity
    ) -> pb.QueryAccountingResponse:
        resp = pb.QueryAccountingResponse(now=self.cluster.clock())
        for run in await self.reads.accounting_runs(req, who):
            shown = resp.jobs.add()
            shown.CopyFrom(run)  # a copy: a pending job's record is ctld's own
            if not req.with_events:
                del shown.events[:]
            shown.spec.ClearField("script")
            shown.spec.ClearField("environment")
        return resp

    async def query_accounting_json(
        self, req: pb.QueryAccountingRequest, who: Identity, mask: fieldmask.FieldMask | None
    ) -> bytes:
        """QueryAccounting as JSON: each run encoded as it is read, the fields the answer
        leaves out skipped, not copied and cleared (sacct over 100,000 jobs)."""
        runs = await self.reads.accounting_runs(req, who)
        return self.jobs_json.runs(runs, mask, req.with_events)

    async def get_nodes(self, req: pb.GetNodesRequest, who: Identity) -> pb.GetNodesResponse:
        only = fieldmask.top_level(req.fields)  # checked by the transport before this
        return pb.GetNodesResponse(
            nodes=self.reads.nodes(
                req.names, only, with_hidden=req.with_hidden, with_history=req.with_history
            ),
            now=self.cluster.clock(),
        )

    async def get_partitions(
        self, req: pb.GetPartitionsRequest, who: Identity
    ) -> pb.GetPartitionsResponse:
        return pb.GetPartitionsResponse(partitions=self.cluster.partition_list(req.names))

    async def update_job(self, req: pb.UpdateJobRequest, who: Identity) -> pb.UpdateJobResponse:
        return pb.UpdateJobResponse(outcomes=await self.cluster.update_hold(who, req))

    async def get_cluster_info(
        self, req: pb.GetClusterInfoRequest, who: Identity
    ) -> pb.GetClusterInfoResponse:
        return pb.GetClusterInfoResponse(
            cluster=self.cluster.config.cluster_name,
            version=__version__,
            start_time=self.cluster.start_time,
            next_job_id=self.cluster.next_job_id,
            store_commits=self.cluster.store.commits,
            store_requests=self.cluster.store.requests,
            sched_passes=self.cluster.passes,
            priority_weights=self.cluster.priority_weights(),
            last_pass_s=self.cluster.last_pass_s,
        )

    async def explain_job(self, req: pb.ExplainJobRequest, who: Identity) -> pb.ExplainJobResponse:
        policy = self.cluster.policy
        resp = self.cluster.explain(who, req.job_id)
        if not policy.may_see(who, resp.job):
            raise InvalidJobId()  # private_data: as squeue -j, not there at all
        resp.job.CopyFrom(policy.shown(who, resp.job))
        for blocker in resp.blockers:
            other = self.cluster.jobs.get(blocker.job_id)
            if other is None or not policy.may_see(who, other):
                blocker.user = ""
        return resp

    async def create_web_login(
        self, req: pb.CreateWebLoginRequest, who: Identity
    ) -> pb.CreateWebLoginResponse:
        if self.web_login is None:
            raise InvalidRequest("this ctld serves no web page (web.enabled = false)")
        return self.web_login(who)

    async def create_reservation(
        self, req: pb.CreateReservationRequest, who: Identity
    ) -> pb.CreateReservationResponse:
        resv = await self.cluster.create_reservation(who, req.reservation)
        return pb.CreateReservationResponse(name=resv.name)

    async def update_reservation(
        self, req: pb.UpdateReservationRequest, who: Identity
    ) -> pb.UpdateReservationResponse:
        await self.cluster.update_reservation(who, req)
        return pb.UpdateReservationResponse()

    async def delete_reservation(
        self, req: pb.DeleteReservationRequest, who: Identity
    ) -> pb.DeleteReservationResponse:
        await self.cluster.delete_reservation(who, req.name)
        return pb.DeleteReservationResponse()

    async def create_step(self, req: pb.CreateStepRequest, who: Identity) -> pb.CreateStepResponse:
        step = await self.cluster.create_step(who, req.spec)
        job = pb.Job()
        job.CopyFrom(self.cluster.policy.shown(who, self.cluster.job(req.spec.job_id)))
        job.spec.ClearField("script")
        job.spec.ClearField("environment")
        del job.events[:]
        del job.steps[:]
        return pb.CreateStepResponse(
            step=step,
            job=job,
            cluster=self.cluster.config.cluster_name,
            step_credential=self.step_credentials.issue(step.job_id, step.step_id),
            resume_window_s=2 * self.cluster.config.heartbeat.timeout_s,
        )

    async def complete_step(
        self, req: pb.CompleteStepRequest, who: Identity
    ) -> pb.CompleteStepResponse:
        await self.cluster.complete_step(who, req)
        return pb.CompleteStepResponse()

    async def complete_job(
        self, req: pb.CompleteJobRequest, who: Identity
    ) -> pb.CompleteJobResponse:
        await self.cluster.complete_job(who, req)
        return pb.CompleteJobResponse()

    async def step_node_lost(
        self, req: pb.StepNodeLostRequest, who: Identity
    ) -> pb.StepNodeLostResponse:
        await self.cluster.step_node_lost(who, req)
        return pb.StepNodeLostResponse()

    async def get_step_stats(
        self, req: pb.GetStepStatsRequest, who: Identity
    ) -> pb.GetStepStatsResponse:
        c = self.cluster
        return step_views.step_stats(c.state, c.state.live, c.policy, who, req)

    async def attach_step(self, req: pb.AttachStepRequest, who: Identity) -> pb.AttachStepResponse:
        step = step_views.attach(self.cluster.state, who, req)
        credential = self.step_credentials.issue(step.job_id, step.step_id)
        return pb.AttachStepResponse(step=step, step_credential=credential)

    async def reconfigure(
        self, req: pb.ReconfigureRequest, who: Identity
    ) -> pb.ReconfigureResponse:
        return await self.cluster.reconfigure(who, source="scontrol")

    async def get_batch_script(
        self, req: pb.GetBatchScriptRequest, who: Identity
    ) -> pb.GetBatchScriptResponse:
        return await batch_scripts.batch_script(self.cluster, who, req.job_id)

    async def update_node(self, req: pb.UpdateNodeRequest, who: Identity) -> pb.UpdateNodeResponse:
        await self.cluster.update_node(who, req)
        return pb.UpdateNodeResponse()

    async def get_reservations(
        self, req: pb.GetReservationsRequest, who: Identity
    ) -> pb.GetReservationsResponse:
        return pb.GetReservationsResponse(
            reservations=self.cluster.reservation_list(req.names), now=self.cluster.clock()
        )

    async def get_shares(self, req: pb.GetSharesRequest, who: Identity) -> pb.GetSharesResponse:
        return pb.GetSharesResponse(rows=self.cluster.share_rows(req.accounts, req.users))

    async def report_usage(
        self, req: pb.ReportUsageRequest, who: Identity
    ) -> pb.ReportUsageResponse:
        bounds = list(req.bounds)
        usage_report.check_bounds(bounds)
        runs = await asyncio.to_thread(self.cluster.store.runs_between, bounds[0], bounds[-1])
        policy = self.cluster.policy
        accounts, users = set(req.accounts), set(req.users)
        shown = (
            j
            for j in runs
            if policy.may_see_accounting(who, j.uid)
            and (not accounts or (j.account or "root") in accounts)
            and (not users or j.user in users)
        )
        now = self.cluster.clock()
        return pb.ReportUsageResponse(
            records=usage_report.usage_records(shown, bounds, now),
            capacity=usage_report.capacity(self.cluster.nodes.values()),
            accounts=usage_report.account_tree(self.cluster.priorities.tree),
            cluster=self.cluster.config.cluster_name,
            now=now,
        )

    async def sacctmgr(self, req: pb.SacctmgrRequest, who: Identity) -> pb.SacctmgrResponse:
        # reads and changes share the RPC: a change checks the store itself
        return await self.cluster.sacctmgr(who, req)


class NodeControllerApi:
    """noded -> ctld. With TLS, a call is the node its certificate names, and only that
    node: the name in a request must match (so a node registers, heartbeats and reports
    jobs for itself only; ctld applies a report only to jobs on the reporting node)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        verify_nodes: bool = True,
        steps: StepCredentials | None = None,
    ) -> None:
        self.cluster = cluster
        self.verify_nodes = verify_nodes
        self.step_credentials = steps or StepCredentials()
        self.methods: dict[str, Callable[[Any], Awaitable[Message]]] = {
            name: getattr(self, PYTHON_NAMES[name]) for name in SERVICES[NODE_CONTROLLER]
        }

    async def call(self, method: str, request: Message, caller: Caller) -> Message:
        if self.verify_nodes:
            if isinstance(request, pb.HeartbeatBatch):
                for beat in request.beats:  # each beat is its node's, as a Heartbeat
                    _check_node(caller, beat.name)
            else:
                claimed = str(getattr(request, "name", "") or getattr(request, "node", ""))
                _check_node(caller, claimed)
        return await self.methods[method](request)

    async def get_step(self, req: pb.GetStepRequest) -> pb.GetStepResponse:
        job, step = self.cluster.step_for_node(req.job_id, req.step_id, req.node)
        credential = self.step_credentials.issue(step.job_id, step.step_id)
        return pb.GetStepResponse(job=job, step=step, step_credential=credential)

    async def register_node(self, req: pb.RegisterNodeRequest) -> pb.RegisterNodeResponse:
        await self.cluster.register_node(req, certified=self.verify_nodes)
        reports = self.cluster.node_reports
        return pb.RegisterNodeResponse(
            cluster=self.cluster.config.cluster_name,
            heartbeat_interval_s=self.cluster.config.heartbeat.interval_s,
            keep_job_ids=self.cluster.jobs_kept_by(req.name),
            peers=reports.verdicts.peers_of(req.name),
            hold_needed=reports.verdicts.tell(req.name),
        )

    async def heartbeat(self, req: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        if req.name not in self.cluster.nodes:
            # a dynamic node a restarted ctld has not met, or one gone from the config:
            # its registration says which (as the batch answers it)
            return pb.HeartbeatResponse(reregister=True)
        known = self.cluster.heartbeat(req)
        if known:
            self.cluster.state.live.record(req)
        if known and req.health:
            await self.cluster.node_faults(self.cluster.nodes[req.name], req.health)
        if not known:
            return pb.HeartbeatResponse(reregister=True)
        reports = self.cluster.node_reports
        return pb.HeartbeatResponse(
            hold_needed=reports.verdicts.tell(req.name),
            peers=reports.verdicts.new_peers_of(req.name),
        )

    async def heartbeats(self, req: pb.HeartbeatBatch) -> pb.HeartbeatBatchResponse:
        """Each beat as its own Heartbeat; a beat naming no node of the config is one to
        register again (its registration then says what is wrong)."""
        if len(req.beats) > MAX_BEATS:
            raise InvalidRequest(f"a heartbeat batch of at most {MAX_BEATS} nodes")
        again: list[str] = []
        for beat in req.beats:
            if (await self.heartbeat(beat)).reregister:
                again.append(beat.name)
        return pb.HeartbeatBatchResponse(reregister=again)

    async def report_job_status(self, req: pb.ReportJobStatusRequest) -> pb.ReportJobStatusResponse:
        await self.cluster.report_status(req)
        return pb.ReportJobStatusResponse()


def _check_node(caller: Caller, claimed: str) -> None:
    if not caller.peer_cert:
        raise Unauthenticated(
            "Access/permission denied: node calls need the node's certificate (from the "
            "cluster CA, not revoked)"
        )
    if caller.peer_cert != claimed:
        log.warning("node call refused", claimed=claimed, certificate=caller.peer_cert)
        raise PermissionDenied(
            f"Access/permission denied: certificate of {caller.peer_cert!r} may not act as "
            f"node {claimed!r}"
        )


__all__ = [
    "ControllerApi",
    "NodeControllerApi",
]
