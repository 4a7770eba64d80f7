"""Dynamic nodes (Slurm's ``slurmd -Z``): a node not in [[nodes]] that registers is taken
in when ``[dynamic_nodes] allow`` says so, and only over a call its node certificate
proves (``corral certs``; ctld's TLS check matched the certificate to the name): never
without one. It joins ``[dynamic_nodes].partitions`` (else the default partition) with
the CPUs, memory and GPUs its own discovery registered."""

from __future__ import annotations

import dataclasses

import structlog

from corral.errors import InvalidNodeName, PermissionDenied
from corral.wire import corral_pb2 as pb
from ctld.core.state import State
from ctld.model.nodes import NodeRecord

log = structlog.get_logger("ctld")

NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def admit(state: State, req: pb.RegisterNodeRequest, *, certified: bool) -> NodeRecord:
    """The record of registering node ``req.name``: the known one, or a dynamic node
    made now. Refused: an unknown node where dynamic nodes are not allowed, or one
    calling without its node certificate, or past ``max_nodes``."""
    known = state.nodes.get(req.name)
    if known is not None:
        return known
    cfg = state.config.dynamic_nodes
    if not cfg.allow:
        raise InvalidNodeName(f"Invalid node name specified: {req.name} is not in the config")
    if not certified:
        log.warning("dynamic node refused: no node certificate", node=req.name)
        raise PermissionDenied(
            f"Access/permission denied: dynamic node {req.name!r} needs its node certificate "
            "(corral certs) and TLS between nodes and ctld"
        )
    if not req.name or len(req.name) > 64 or not set(req.name) <= NAME_CHARS:
        raise InvalidNodeName(f"Invalid node name specified: {req.name[:64]!r}")
    if sum(n.dynamic for n in state.nodes.values()) >= cfg.max_nodes:
        raise PermissionDenied(
            f"Access/permission denied: {cfg.max_nodes} dynamic nodes already "
            "([dynamic_nodes].max_nodes)"
        )
    default = state.config.default_partition
    parts = list(cfg.partitions) or ([default.name] if default else [])
    node = NodeRecord(
        name=req.name, config=cfg.node_config(req.name), partitions=parts, dynamic=True
    )
    state.nodes[req.name] = node
    state.config = dataclasses.replace(
        state.config,
        partitions=tuple(
            dataclasses.replace(p, nodes=(*p.nodes, req.name)) if p.name in parts else p
            for p in state.config.partitions
        ),
    )
    log.info("dynamic node joins", node=req.name, partitions=parts)
    return node
