"""One set of size limits, checked once where a request enters ctld.

Every string field, list and map of every Controller request is bounded; a few fields
have their own, larger bounds (the script, the environment, the argument list). The
bounds are chosen so that anything accepted fits in what noded accepts: a whole job
(spec plus what ctld adds) stays far under ``NODED_MAX_RECEIVE_BYTES``, so an
accepted job can always be launched. A rejection names the field, its size and the
limit.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from corral.errors import TooLarge

KIB = 1024
MIB = 1024 * KIB
MAX_SCRIPT_BYTES = 4 * MIB  # Slurm's default max_script_size
MAX_ENV_BYTES = 1 * MIB  # the whole environment
MAX_ENV_VALUE = 128 * KIB  # Linux's MAX_ARG_STRLEN: one longer variable cannot exec anyway
MAX_ARGV_BYTES = 256 * KIB  # the script's arguments, all together
MAX_SUBMIT_LINE = MAX_ARGV_BYTES + 64 * KIB  # the arguments fit in it
MAX_STRING = 4096  # any other string field
MAX_ITEMS = 10000  # any list or map
MAX_SPEC_BYTES = 6 * MIB  # a serialized JobSpec
MAX_REQUEST_BYTES = 8 * MIB  # an HTTP body (JSON escaping makes text longer)
NODED_MAX_RECEIVE_BYTES = 16 * MIB  # a LaunchJob: a spec plus allocations and steps
# Every daemon's gRPC server. gRPC sets SO_REUSEPORT by default: a second server on a
# taken port then binds anyway and the kernel splits connections between the two (a
# node's TLS handshake landing on another daemon's plaintext port); ours fail instead.
GRPC_SERVER_OPTIONS = (
    ("grpc.max_receive_message_length", NODED_MAX_RECEIVE_BYTES),
    ("grpc.so_reuseport", 0),
)
# The daemons' long-lived channels to each other: gRPC's own reconnect backoff grows to
# 120 s by default, so a node whose ctld was away for a minute would wait up to two
# more to reach it again (and ctld a restarted noded): at most 1 s here (a node whose
# peers hear ctld again must reach it soon: noded/agent.py). Not
# grpc.min_reconnect_backoff_ms: gRPC takes it as the connection attempt's timeout
# (20 s by default), and at 200 ms a peer busy for a moment (a ctld in a registration
# storm, a loaded noded) failed the call: a launch failed and its job was requeued.
GRPC_RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
)

# fields with their own string bound (message.field)
_STRING_LIMITS = {
    "JobSpec.script": MAX_SCRIPT_BYTES,
    "JobSpec.submit_line": MAX_SUBMIT_LINE,
    "JobSpec.dependency": 64 * KIB,
    "JobSpec.array": 64 * KIB,
    "JobSpec.nodelist": 64 * KIB,
    "JobSpec.exclude": 64 * KIB,
    "JobSpec.comment": MAX_STRING,
    "StepSpec.submit_line": 64 * KIB,
    "Reservation.nodes": 64 * KIB,
}
_FRIENDLY = {
    "JobSpec.script": "the batch script",
    "JobSpec.environment": "the job environment",
    "JobSpec.argv": "the script's arguments",
    "JobSpec.submit_line": "the submit line",
}


def _key(fd: FieldDescriptor) -> str:
    owner = fd.containing_type
    return f"{owner.name if owner else ''}.{fd.name}"


def _name(fd: FieldDescriptor) -> str:
    key = _key(fd)
    return _FRIENDLY.get(key, key)


def _too_large(what: str, size: int, limit: int, unit: str) -> TooLarge:
    return TooLarge(f"{what} is too large: {size} {unit}, the limit is {limit} {unit}")


def _text(fd: FieldDescriptor, value: str) -> None:
    limit = _STRING_LIMITS.get(_key(fd), MAX_STRING)
    if len(value) > limit // 4 and len(value.encode()) > limit:  # bytes, counted lazily
        raise _too_large(_name(fd), len(value.encode()), limit, "bytes")


def check(message: Message) -> None:
    """Raise TooLarge for the first field of ``message`` (recursively) over its limit."""
    for fd, value in message.ListFields():
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            _check_map(fd, value)
        elif fd.is_repeated:
            if len(value) > MAX_ITEMS:
                raise _too_large(_name(fd), len(value), MAX_ITEMS, "items")
            if fd.type == FieldDescriptor.TYPE_STRING:
                total = 0
                for item in value:
                    _text(fd, item)
                    total += len(item.encode())
                if fd.name == "argv" and total > MAX_ARGV_BYTES:
                    raise _too_large(_name(fd), total, MAX_ARGV_BYTES, "bytes")
            elif fd.type == FieldDescriptor.TYPE_MESSAGE:
                for item in value:
                    check(item)
        elif fd.type == FieldDescriptor.TYPE_STRING:
            _text(fd, value)
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            check(value)
    if message.DESCRIPTOR.name == "JobSpec":
        size = message.ByteSize()
        if size > MAX_SPEC_BYTES:
            raise _too_large("the job", size, MAX_SPEC_BYTES, "bytes")


def _check_map(fd: FieldDescriptor, value: object) -> None:
    items = value.items()  # type: ignore[attr-defined]
    if len(items) > MAX_ITEMS:
        raise _too_large(_name(fd), len(items), MAX_ITEMS, "items")
    total = 0
    value_fd = fd.message_type.fields_by_name["value"]  # type: ignore[union-attr]
    for k, v in items:
        if len(k) > MAX_STRING:
            raise _too_large(f"a key of {_name(fd)}", len(k), MAX_STRING, "characters")
        if value_fd.type == FieldDescriptor.TYPE_STRING:
            size = len(v.encode())
            if size > MAX_ENV_VALUE:
                raise _too_large(f"{_name(fd)} variable {k[:40]}", size, MAX_ENV_VALUE, "bytes")
            total += len(k) + size
        elif value_fd.type == FieldDescriptor.TYPE_MESSAGE:
            check(v)
    if total > MAX_ENV_BYTES:
        raise _too_large(_name(fd), total, MAX_ENV_BYTES, "bytes")
