"""The light generated modules of corral.wire, rendered from protoc's descriptor set.

``methods``     every service's method table (names only: no protobuf import), which
                ctld registers its servicers from and the clients call through;
``json_types``  a TypedDict per message in proto3's JSON mapping (camelCase keys, enums
                by name, 64-bit integers as strings), for the commands' requests and
                replies (imported only under TYPE_CHECKING: no runtime cost);
``controller``  ``ControllerCalls``: one typed method per Controller RPC over an
                abstract ``call(method, request)`` that each transport implements;
``views``       ``<Message>Fields``: a typed property per scalar field of the messages
                the commands' reply views read (client/views/ subclasses them, adding
                only what is computed or nested).

Called by scripts/genproto.py; ``make proto-check`` covers its output like protoc's.
"""

from __future__ import annotations

import keyword
import re

from google.protobuf import descriptor_pb2

PACKAGE = "corral.v1"
FD = descriptor_pb2.FieldDescriptorProto

_SCALAR: dict[int, str] = {
    FD.TYPE_DOUBLE: "float",
    FD.TYPE_FLOAT: "float",
    FD.TYPE_INT64: "int | str",
    FD.TYPE_UINT64: "int | str",
    FD.TYPE_SINT64: "int | str",
    FD.TYPE_FIXED64: "int | str",
    FD.TYPE_SFIXED64: "int | str",
    FD.TYPE_INT32: "int",
    FD.TYPE_UINT32: "int",
    FD.TYPE_SINT32: "int",
    FD.TYPE_FIXED32: "int",
    FD.TYPE_SFIXED32: "int",
    FD.TYPE_BOOL: "bool",
    FD.TYPE_STRING: "str",
    FD.TYPE_BYTES: "str",  # base64 in JSON
}


def snake(name: str) -> str:
    """``SubmitJob`` -> ``submit_job``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _py_name(full: str) -> str:
    """``.corral.v1.JobStatusUpdate.Kind`` -> ``JobStatusUpdate_Kind``."""
    return full.removeprefix(f".{PACKAGE}.").replace(".", "_")


class _Types:
    def __init__(self, files: list[descriptor_pb2.FileDescriptorProto]) -> None:
        self.enums: list[tuple[str, list[str]]] = []
        self.messages: list[tuple[str, descriptor_pb2.DescriptorProto]] = []
        self.maps: dict[str, descriptor_pb2.DescriptorProto] = {}
        for f in files:
            if f.package != PACKAGE:
                continue
            for e in f.enum_type:
                self.enums.append((e.name, [v.name for v in e.value]))
            for m in f.message_type:
                self._message(m.name, f".{PACKAGE}.{m.name}", m)

    def _message(self, name: str, full: str, m: descriptor_pb2.DescriptorProto) -> None:
        for e in m.enum_type:
            self.enums.append((f"{name}_{e.name}", [v.name for v in e.value]))
        for nested in m.nested_type:
            if nested.options.map_entry:
                self.maps[f"{full}.{nested.name}"] = nested
            else:
                self._message(f"{name}_{nested.name}", f"{full}.{nested.name}", nested)
        self.messages.append((name, m))

    def field_type(self, f: descriptor_pb2.FieldDescriptorProto) -> str:
        if f.type == FD.TYPE_MESSAGE and f.type_name in self.maps:
            entry = self.maps[f.type_name]
            return f"dict[str, {self.field_type(entry.field[1])}]"
        if f.type == FD.TYPE_MESSAGE or f.type == FD.TYPE_ENUM:
            base = _py_name(f.type_name)
        else:
            base = _SCALAR[f.type]
        if f.label == FD.LABEL_REPEATED:
            # a list is invariant: repeated 64-bit integers are the strings replies carry
            return f"list[{'str' if base == 'int | str' else base}]"
        return base


def _json_types(types: _Types) -> str:
    out = [
        '"""proto3 JSON mapping of every corral.v1 message, as TypedDicts (for type checking).',
        "",
        "Keys are camelCase, every key is optional (proto3 JSON omits defaults), enums",
        "travel by name and 64-bit integers as strings (a single one may be sent as a number).",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Literal, TypedDict",
        "",
    ]
    for name, values in types.enums:
        out.append("")
        literal = ", ".join(repr(v) for v in values)
        out.append(f"{name} = Literal[{literal}]")
    for name, m in types.messages:
        fields = [(f.json_name, types.field_type(f)) for f in m.field]
        out.append("")
        if any(keyword.iskeyword(k) for k, _ in fields):
            items = ", ".join(f"{k!r}: {v!r}" for k, v in fields)
            out.append(f"{name} = TypedDict({name!r}, {{{items}}}, total=False)")
            continue
        out.append("")
        out.append(f"class {name}(TypedDict, total=False):")
        if not fields:
            out.append("    pass")
        for key, typ in fields:
            out.append(f"    {key}: {typ}")
    return "\n".join(out) + "\n"


def _methods(services: list[descriptor_pb2.ServiceDescriptorProto]) -> str:
    out = [
        '"""The method table of every corral.v1 service, from the proto.',
        "",
        "service -> method -> (request message, response message, client streams, server",
        "streams). Names only, so the short-lived commands can read it without protobuf.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
    ]
    names = []
    for s in services:
        const = snake(s.name).upper()
        names.append((const, s.name))
        out.append(f'{const} = "{PACKAGE}.{s.name}"')
    out.append("")
    out.append("SERVICES: dict[str, dict[str, tuple[str, str, bool, bool]]] = {")
    for (const, _), s in zip(names, services, strict=True):
        out.append(f"    {const}: {{")
        for m in s.method:
            req, resp = _py_name(m.input_type), _py_name(m.output_type)
            out.append(
                f'        "{m.name}": ("{req}", "{resp}", '
                f"{m.client_streaming}, {m.server_streaming}),"
            )
        out.append("    },")
    out.append("}")
    out.append("")
    out.append("#: RPC name -> the Python method name that serves or calls it")
    out.append("PYTHON_NAMES: dict[str, str] = {")
    for s in services:
        for m in s.method:
            out.append(f'    "{m.name}": "{snake(m.name)}",')
    out.append("}")
    return "\n".join(out) + "\n"


def _controller(service: descriptor_pb2.ServiceDescriptorProto) -> str:
    out = [
        '"""The typed Controller client surface: one method per RPC of the proto.',
        "",
        "A transport subclasses ``ControllerCalls`` and implements ``call(method, request)``",
        "(corral/api.py: HTTP/JSON and gRPC). Requests and replies are the proto3 JSON",
        "TypedDicts of ``json_types``, imported only for type checking: a command that",
        "uses this pays for no typing, protobuf or grpc import.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "TYPE_CHECKING = False",
        "if TYPE_CHECKING:",
        "    from typing import Any",
        "",
        "    from corral.wire import json_types as t",
        "",
        "",
        "class ControllerCalls:",
        f'    """The {PACKAGE}.{service.name} service, one method per RPC."""',
        "",
        "    def call(self, method: str, request: Any) -> Any:",
        '        """Send ``request`` (proto3 JSON) to ``method``: the reply, or a CorralError."""',
        "        raise NotImplementedError",
    ]
    for m in service.method:
        req, resp = _py_name(m.input_type), _py_name(m.output_type)
        out += [
            "",
            f"    def {snake(m.name)}(self, request: t.{req}) -> t.{resp}:",
            f'        reply: t.{resp} = self.call("{m.name}", request)',
            "        return reply",
        ]
    return "\n".join(out) + "\n"


#: the messages the commands read through client/views/ (each one's scalar fields)
VIEW_MESSAGES = (
    *("AccountParent", "CancelOutcome", "Gpu", "Interruption", "Job", "JobSpec"),
    *("JobUsage", "LiveUsage", "Node", "NodeAllocation", "NodeResources", "NodeUsage"),
    *("Partition", "PriorityFactors", "Reservation", "ShareRow", "Step", "StepNode"),
    *("StepSpec", "StepStat", "UsageRecord"),
)
_VIEW_READERS = {"int": "as_int", "int | str": "as_int", "float": "as_float", "str": "as_str"}


def _view_property(f: descriptor_pb2.FieldDescriptorProto, types: _Types) -> list[str]:
    """One field's typed property: proto3 JSON's value, or its default when absent."""
    key = f'self.raw.get("{f.json_name}")'
    if f.type == FD.TYPE_ENUM:
        enum = next(v for n, v in types.enums if n == _py_name(f.type_name))
        typ, default = "str", enum[0]
    else:
        typ, default = _SCALAR[f.type], ""
    if f.label == FD.LABEL_REPEATED:
        reader = _VIEW_READERS.get(typ)
        if typ in ("bool", "int", "float") or f.type == FD.TYPE_ENUM or reader == "as_str":
            typ, body = f"list[{typ}]", f"list({key} or ())"  # JSON's own types
        else:
            typ = "int" if typ == "int | str" else typ
            body = f"[{reader}(v) for v in {key} or ()]"
            typ = f"list[{typ}]"
    elif f.type == FD.TYPE_ENUM:
        body = f"as_str({key}) or {default!r}"
    elif typ == "bool":
        body = f"bool({key})"
    else:
        body = f"{_VIEW_READERS[typ]}({key})"
        typ = "int" if typ == "int | str" else typ
    name = f.name + ("_" if keyword.iskeyword(f.name) else "")
    return ["", "    @property", f"    def {name}(self) -> {typ}:", f"        return {body}"]


def _views(types: _Types) -> str:
    out = [
        '"""Typed reading of the commands' + "'" + " replies: a class per message, a property per",
        "scalar field, over proto3 JSON (a dict). Absent fields read as proto3's defaults,",
        "64-bit integers (strings on the wire) as ints, enums by name; a value of the wrong",
        "kind reads as the default, never as an exception in the middle of a listing.",
        "client/views/ subclasses these, adding what is computed or nested.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "TYPE_CHECKING = False",
        "if TYPE_CHECKING:",
        "    from corral.wire import json_types as t",
        "",
        "",
        "def as_int(value: object) -> int:",
        "    if isinstance(value, str) and not value.lstrip('-').isdigit():",
        "        return 0  # int() would read '5_9' as 59: a wire integer is digits",
        "    try:",
        "        return int(value)  # type: ignore[call-overload,no-any-return]",
        "    except (TypeError, ValueError):",
        "        return 0",
        "",
        "",
        "def as_float(value: object) -> float:",
        "    try:",
        "        return float(value)  # type: ignore[arg-type]",
        "    except (TypeError, ValueError):",
        "        return 0.0",
        "",
        "",
        "def as_str(value: object) -> str:",
        '    return value if isinstance(value, str) else ""',
    ]
    messages = dict(types.messages)
    for name in VIEW_MESSAGES:
        m = messages[name]
        out += ["", "", f"class {name}Fields:", f'    """{name}\'s scalar fields."""', ""]
        out += ['    __slots__ = ("raw",)', ""]
        out += [f"    def __init__(self, raw: t.{name}) -> None:", "        self.raw = raw"]
        for f in m.field:
            if f.type == FD.TYPE_MESSAGE:
                continue  # nested: the hand-written view wraps it in its own view
            out += _view_property(f, types)
    return "\n".join(out) + "\n"


def render(descriptor_set: bytes) -> dict[str, str]:
    """File name -> source text of the light wire modules."""
    fds = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
    files = [f for f in fds.file if f.package == PACKAGE]
    services = [s for f in files for s in f.service]
    controller = next(s for s in services if s.name == "Controller")
    return {
        "methods.py": _methods(services),
        "json_types.py": _json_types(_Types(files)),
        "controller.py": _controller(controller),
        "views.py": _views(_Types(files)),
    }
