"""Server-side field masks: the fields a query's answer carries (``fields``, 1200).

GetJobs, QueryAccounting and GetNodes take the names of the fields their jobs or
nodes should carry: proto field names (``job_id``, ``state``) or their JSON names
(``jobId``), a message field's own fields by a dotted path (``spec.name``; a repeated
or map field goes whole). Through the gateway, ``?fields=jobId,state`` on the URL
adds to the body's. An empty
mask is every field, as before. A name the message does not have is refused
(InvalidRequest, naming it), never ignored: a command that asks for a field that is not
there learns so at once.

The two transports apply a mask differently, each at its cheapest:
- the JSON gateway (``ControllerApi.call_json``) encodes the answer with the fields
  outside the mask skipped (``jsonmap``'s ``Skip``), copying nothing;
- gRPC (``ControllerApi.call``) gets each job or node as a new message of the masked
  fields (protobuf's own ``FieldMask.MergeMessage``).

A command passes its format's fields (squeue ``-o``, sacct ``--format``, sinfo ``-o``):
e.g. ``{"filter": {...}, "fields": ["job_id", "state", "spec.name"]}`` to
``/corral.v1.Controller/GetJobs``, or ``request.fields.extend([...])`` over gRPC.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from google.protobuf import field_mask_pb2
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from corral.errors import InvalidRequest
from corral.wire import corral_pb2 as pb
from ctld.codec.jsonmap import Skip

MAX_PATHS = 128
MAX_PATH_LEN = 128
_MAX_SKIPS = 64  # distinct masks whose Skip is kept (jsonmap caches plans by identity)

# the RPCs that take a mask: the message of their answer's items, and that field's name
MASKED: dict[str, tuple[Descriptor, str]] = {
    "GetJobs": (pb.Job.DESCRIPTOR, "jobs"),
    "QueryAccounting": (pb.Job.DESCRIPTOR, "jobs"),
    "GetNodes": (pb.Node.DESCRIPTOR, "nodes"),
}

Tree = dict[str, Any]  # field name -> its sub-tree, or None: the whole field

# masked requests by method, since ctld started (corral_masked_queries_total): whether
# the commands (client/fieldmasks.py) and the JSON API's callers send one
MASKED_CALLS: Counter[str] = Counter()


class FieldMask:
    """A checked mask over ``desc``; ``paths`` sorted, duplicates and covered paths out."""

    def __init__(self, desc: Descriptor, paths: Sequence[str], method: str) -> None:
        if len(paths) > MAX_PATHS:
            raise InvalidRequest(f"{method}: a field mask of at most {MAX_PATHS} names")
        self.desc = desc
        self.tree: Tree = {}
        for path in paths:
            self._add(path, method)
        self.paths = tuple(sorted(_flatten(self.tree)))

    def _add(self, path: str, method: str) -> None:
        if not path or len(path) > MAX_PATH_LEN:
            raise InvalidRequest(f"{method}: an empty or too long name in the field mask")
        desc, node = self.desc, self.tree
        parts = path.split(".")
        for i, part in enumerate(parts):
            # the proto name, or its JSON name (the JSON API's ``?fields=jobId,state``)
            fd = desc.fields_by_name.get(part) or desc.fields_by_camelcase_name.get(part)
            if fd is None:
                raise InvalidRequest(
                    f"{method}: unknown field {path!r} in the field mask "
                    f"({desc.name} has no field {part!r})"
                )
            name = fd.name
            last = i == len(parts) - 1
            if last:
                node[name] = None  # the whole field (it covers any narrower path)
                return
            if fd.message_type is None or fd.is_repeated:
                raise InvalidRequest(
                    f"{method}: field mask {path!r}: {desc.name}.{name} has no fields "
                    "of its own to pick (a repeated, map or plain field goes whole)"
                )
            if name in node and node[name] is None:
                return  # already whole
            node = node.setdefault(name, {})
            desc = fd.message_type

    def skip(self, base: Skip) -> Skip | None:
        """``base`` plus every field outside the mask, by message type; None when the
        same message type is masked two ways (the caller copies instead)."""
        key = (id(base), self.paths)
        hit = _SKIPS.get(key)
        if hit is not None:
            return hit
        dropped: dict[str, frozenset[str]] = dict(base)
        seen: dict[str, Tree] = {}
        todo: list[tuple[Descriptor, Tree]] = [(self.desc, self.tree)]
        while todo:
            desc, tree = todo.pop()
            if seen.setdefault(desc.full_name, tree) is not tree:
                return None
            outside = frozenset(f.name for f in desc.fields if f.name not in tree)
            dropped[desc.full_name] = dropped.get(desc.full_name, frozenset()) | outside
            for name, sub in tree.items():
                inner = desc.fields_by_name[name].message_type
                if sub is not None and inner is not None:
                    todo.append((inner, sub))
        if len(_SKIPS) >= _MAX_SKIPS:
            return None  # hostile variety: copy (a Skip kept for each would never go)
        _SKIPS[key] = dropped
        return dropped

    def apply(self, msg: Message) -> Message:
        """A new message of ``msg``'s type with only the masked fields."""
        out = type(msg)()
        field_mask_pb2.FieldMask(paths=list(self.paths)).MergeMessage(msg, out)
        return out


_SKIPS: dict[tuple[int, tuple[str, ...]], Skip] = {}


def _flatten(tree: Tree, prefix: str = "") -> list[str]:
    out: list[str] = []
    for name, sub in tree.items():
        out.extend([prefix + name] if sub is None else _flatten(sub, f"{prefix}{name}."))
    return out


def of_request(method: str, request: Message) -> FieldMask | None:
    """The request's checked mask; None when it has none (every field)."""
    target = MASKED.get(method)
    if target is None:
        return None
    paths = list(getattr(request, "fields", ()))
    if not paths:
        return None
    mask = FieldMask(target[0], paths, method)
    MASKED_CALLS[method] += 1
    return mask


def from_query(method: str, request: Any, value: str) -> None:
    """Add the gateway's ``?fields=a,b`` to ``request``'s mask (checked when used)."""
    if method not in MASKED:
        raise InvalidRequest(f"{method} takes no field mask (?fields=)")
    names = [n.strip() for n in value.split(",")]
    if len(names) > MAX_PATHS:
        raise InvalidRequest(f"{method}: a field mask of at most {MAX_PATHS} names")
    request.fields.extend(n for n in names if n)


# the RPCs whose handler makes only the mask's top-level fields (the transport still
# masks what is inside them): GetNodes, where making each whole node was most of a
# masked call at 12,500 nodes
MADE_MASKED = frozenset({"GetNodes"})


def for_handler(method: str, request: Message) -> Message:
    """The request as ``method``'s handler takes it under a mask."""
    return request if method in MADE_MASKED else unmasked(request)


def top_level(paths: Sequence[str]) -> frozenset[str] | None:
    """The top-level fields of a (checked) mask's paths; None: no mask, every field."""
    return frozenset(p.split(".", 1)[0] for p in paths) or None


def unmasked(request: Message) -> Message:
    """A copy of ``request`` without its mask (the handler answers whole; the
    transport masks the answer)."""
    out = type(request)()
    out.CopyFrom(request)
    out.ClearField("fields")
    return out


def apply_to(method: str, mask: FieldMask, resp: Message) -> Message:
    """The answer with each of its jobs or nodes masked (gRPC's typed path)."""
    items = getattr(resp, MASKED[method][1])
    masked = [mask.apply(m) for m in items]
    del items[:]
    items.extend(masked)
    return resp
