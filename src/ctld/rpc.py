"""RPC handlers: thin adapters from requests to Cluster operations.

``ControllerApi`` holds the Controller methods, independent of transport: the gRPC
servicer and the HTTP/JSON gateway both call it with a parsed request and the
caller's metadata, so the two transports cannot drift apart. Errors leave as
CorralError; each transport maps them with the class's own ``grpc_code``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
import structlog
from google.protobuf.message import Message

from corral import __version__
from corral.errors import CorralError, InvalidRequest
from corral.identity import Identity
from corral.wire import corral_pb2 as pb
from corral.wire import corral_pb2_grpc as pbg
from ctld.auth import Authenticator
from ctld.cluster import Cluster
from ctld.jsonmap import Skip, message_to_json

log = structlog.get_logger("ctld.rpc")
ERROR_KEY = "x-corral-error"  # trailing metadata: the CorralError class name

Handler = Callable[[Any, Identity], Awaitable[Message]]

_HIDDEN_SPEC = frozenset({"script", "environment"})
# (with_events, with_spec) -> fields a GetJobs reply leaves out; constants, so the
# converter's plans are cached
_JOB_SKIPS: dict[tuple[bool, bool], Skip] = {
    (False, False): {"corral.v1.Job": frozenset({"events"}), "corral.v1.JobSpec": _HIDDEN_SPEC},
    (True, False): {"corral.v1.JobSpec": _HIDDEN_SPEC},
    (False, True): {"corral.v1.Job": frozenset({"events"})},
    (True, True): {},
}


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class ControllerApi:
    """The Controller service, as plain async methods (request, identity) -> response."""

    def __init__(self, cluster: Cluster, auth: Authenticator) -> None:
        self.cluster = cluster
        self.auth = auth
        self._job_json: dict[tuple[int, tuple[bool, bool]], tuple[int, bytes]] = {}
        self.methods: dict[str, tuple[type[Message], Handler]] = {
            "SubmitJob": (pb.SubmitJobRequest, self.submit_job),
            "CancelJobs": (pb.CancelJobsRequest, self.cancel_jobs),
            "GetJobs": (pb.GetJobsRequest, self.get_jobs),
            "QueryAccounting": (pb.QueryAccountingRequest, self.query_accounting),
            "GetNodes": (pb.GetNodesRequest, self.get_nodes),
            "GetPartitions": (pb.GetPartitionsRequest, self.get_partitions),
            "UpdateJob": (pb.UpdateJobRequest, self.update_job),
            "GetClusterInfo": (pb.GetClusterInfoRequest, self.get_cluster_info),
            "GetShares": (pb.GetSharesRequest, self.get_shares),
            "ExplainJob": (pb.ExplainJobRequest, self.explain_job),
            "CreateReservation": (pb.CreateReservationRequest, self.create_reservation),
            "UpdateReservation": (pb.UpdateReservationRequest, self.update_reservation),
            "DeleteReservation": (pb.DeleteReservationRequest, self.delete_reservation),
            "GetReservations": (pb.GetReservationsRequest, self.get_reservations),
            "UpdateNode": (pb.UpdateNodeRequest, self.update_node),
            "CreateStep": (pb.CreateStepRequest, self.create_step),
            "CompleteStep": (pb.CompleteStepRequest, self.complete_step),
            "CompleteJob": (pb.CompleteJobRequest, self.complete_job),
        }

    async def call(self, method: str, request: Message, metadata: Mapping[str, str]) -> Message:
        who = self.auth.identify(metadata)
        _, handler = self.methods[method]
        return await handler(request, who)

    async def call_json(self, method: str, request: Message, metadata: Mapping[str, str]) -> bytes:
        """The reply as proto3 JSON text (for the gateway)."""
        who = self.auth.identify(metadata)
        if method == "GetJobs":
            assert isinstance(request, pb.GetJobsRequest)
            return self.get_jobs_json(request, who)
        _, handler = self.methods[method]
        return _dumps(message_to_json(await handler(request, who)))

    def get_jobs_json(self, req: pb.GetJobsRequest, who: Identity) -> bytes:
        """GetJobs as JSON, each job encoded once per revision: squeue in a loop over
        thousands of unchanged pending jobs re-encodes none of them."""
        key = (req.with_events, req.with_spec)
        skip = _JOB_SKIPS[key]
        revisions = self.cluster.revisions
        cache = self._job_json
        parts: list[bytes] = []
        for job in sorted(self.cluster.select(req.filter), key=lambda j: j.job_id):
            rev = revisions.get(job.job_id, 0)
            hit = cache.get((job.job_id, key))
            if hit is None or hit[0] != rev:
                hit = (rev, _dumps(message_to_json(job, skip)))
                cache[(job.job_id, key)] = hit
            parts.append(hit[1])
        if len(cache) > 4 * len(self.cluster.jobs) + 1024:  # drop entries of purged jobs
            known = self.cluster.jobs
            for stale in [k for k in cache if k[0] not in known]:
                del cache[stale]
        now = _dumps(self.cluster.clock())
        if not parts:
            return b'{"now":' + now + b"}"
        return b'{"jobs":[' + b",".join(parts) + b'],"now":' + now + b"}"

    async def submit_job(self, req: pb.SubmitJobRequest, who: Identity) -> pb.SubmitJobResponse:
        if not req.HasField("spec"):
            raise InvalidRequest("SubmitJob needs a job spec")
        job = await self.cluster.submit(who, req.spec)
        return pb.SubmitJobResponse(job_id=job.job_id, cluster=job.cluster)

    async def cancel_jobs(self, req: pb.CancelJobsRequest, who: Identity) -> pb.CancelJobsResponse:
        return pb.CancelJobsResponse(outcomes=await self.cluster.cancel(who, req))

    async def get_jobs(self, req: pb.GetJobsRequest, who: Identity) -> pb.GetJobsResponse:
        resp = pb.GetJobsResponse(now=self.cluster.clock())
        for job in sorted(self.cluster.select(req.filter), key=lambda j: j.job_id):
            out = resp.jobs.add()
            out.CopyFrom(job)
            if not req.with_events:
                del out.events[:]
            if not req.with_spec:
                out.spec.ClearField("script")
                out.spec.ClearField("environment")
        return resp

    async def query_accounting(
        self, req: pb.QueryAccountingRequest, who: Identity
    ) -> pb.QueryAccountingResponse:
        flt = req.filter
        jobs = await asyncio.to_thread(
            self.cluster.store.query_jobs,
            job_ids=list(flt.job_ids),
            users=list(flt.users),
            states=[int(s) for s in flt.states],
            names=list(flt.names),
            partitions=list(flt.partitions),
            accounts=list(flt.accounts),
            start_after=req.start_after,
            end_before=req.end_before,
            limit=req.limit,
        )
        resp = pb.QueryAccountingResponse(now=self.cluster.clock())
        for job in jobs:
            job.spec.ClearField("script")
            job.spec.ClearField("environment")
            resp.jobs.append(job)
        return resp

    async def get_nodes(self, req: pb.GetNodesRequest, who: Identity) -> pb.GetNodesResponse:
        return pb.GetNodesResponse(
            nodes=self.cluster.node_list(req.names), now=self.cluster.clock()
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
        return self.cluster.explain(who, req.job_id)

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
        job.CopyFrom(self.cluster.job(req.spec.job_id))
        job.spec.ClearField("script")
        job.spec.ClearField("environment")
        del job.events[:]
        del job.steps[:]
        return pb.CreateStepResponse(step=step, job=job, cluster=self.cluster.config.cluster_name)

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


def _metadata(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
    return {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}


async def _abort(context: grpc.aio.ServicerContext[Any, Any], exc: CorralError) -> None:
    context.set_trailing_metadata(((ERROR_KEY, type(exc).__name__),))
    await context.abort(getattr(grpc.StatusCode, exc.grpc_code), exc.message)


class ControllerServicer(pbg.ControllerServicer):
    """gRPC adapter: metadata in, CorralError out as its status code."""

    def __init__(self, api: ControllerApi) -> None:
        self.api = api

    async def _call(
        self, name: str, request: Message, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Any:
        try:
            return await self.api.call(name, request, _metadata(context))
        except CorralError as exc:
            await _abort(context, exc)
            raise  # unreachable: abort raises

    async def SubmitJob(self, request: Any, context: Any) -> Any:
        return await self._call("SubmitJob", request, context)

    async def CancelJobs(self, request: Any, context: Any) -> Any:
        return await self._call("CancelJobs", request, context)

    async def GetJobs(self, request: Any, context: Any) -> Any:
        return await self._call("GetJobs", request, context)

    async def QueryAccounting(self, request: Any, context: Any) -> Any:
        return await self._call("QueryAccounting", request, context)

    async def GetNodes(self, request: Any, context: Any) -> Any:
        return await self._call("GetNodes", request, context)

    async def GetPartitions(self, request: Any, context: Any) -> Any:
        return await self._call("GetPartitions", request, context)

    async def CreateStep(self, request: Any, context: Any) -> Any:
        return await self._call("CreateStep", request, context)

    async def CompleteStep(self, request: Any, context: Any) -> Any:
        return await self._call("CompleteStep", request, context)

    async def CompleteJob(self, request: Any, context: Any) -> Any:
        return await self._call("CompleteJob", request, context)

    async def UpdateNode(self, request: Any, context: Any) -> Any:
        return await self._call("UpdateNode", request, context)

    async def UpdateJob(self, request: Any, context: Any) -> Any:
        return await self._call("UpdateJob", request, context)

    async def GetClusterInfo(self, request: Any, context: Any) -> Any:
        return await self._call("GetClusterInfo", request, context)

    async def GetShares(self, request: Any, context: Any) -> Any:
        return await self._call("GetShares", request, context)

    async def ExplainJob(self, request: Any, context: Any) -> Any:
        return await self._call("ExplainJob", request, context)

    async def CreateReservation(self, request: Any, context: Any) -> Any:
        return await self._call("CreateReservation", request, context)

    async def UpdateReservation(self, request: Any, context: Any) -> Any:
        return await self._call("UpdateReservation", request, context)

    async def DeleteReservation(self, request: Any, context: Any) -> Any:
        return await self._call("DeleteReservation", request, context)

    async def GetReservations(self, request: Any, context: Any) -> Any:
        return await self._call("GetReservations", request, context)


class NodeControllerServicer(pbg.NodeControllerServicer):
    """noded -> ctld. Node authentication (munge/mTLS) slots in through ``auth`` later."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def GetStep(
        self, request: pb.GetStepRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetStepResponse:
        try:
            job, step = self.cluster.step_for_node(request.job_id, request.step_id, request.node)
        except CorralError as exc:
            await _abort(context, exc)
            raise
        return pb.GetStepResponse(job=job, step=step)

    async def RegisterNode(
        self, request: pb.RegisterNodeRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RegisterNodeResponse:
        try:
            await self.cluster.register_node(request)
        except CorralError as exc:
            await _abort(context, exc)
        return pb.RegisterNodeResponse(
            cluster=self.cluster.config.cluster_name,
            heartbeat_interval_s=self.cluster.config.heartbeat.interval_s,
            keep_job_ids=self.cluster.jobs_kept_by(request.name),
        )

    async def Heartbeat(
        self, request: pb.HeartbeatRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.HeartbeatResponse:
        try:
            known = self.cluster.heartbeat(request)
            if known and request.health:
                await self.cluster.node_faults(self.cluster.nodes[request.name], request.health)
        except CorralError as exc:
            await _abort(context, exc)
            raise
        return pb.HeartbeatResponse(reregister=not known)

    async def ReportJobStatus(
        self, request: pb.ReportJobStatusRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReportJobStatusResponse:
        try:
            await self.cluster.report_status(request)
        except CorralError as exc:
            await _abort(context, exc)
        return pb.ReportJobStatusResponse()


__all__ = ["ERROR_KEY", "ControllerApi", "ControllerServicer", "NodeControllerServicer"]
