"""The reader behind tests/unit/test_commit_path.py: where ctld's code writes a job, a
step or a node, found by reading it (ast), so that a write around the commit step
fails a test naming the line.

What counts as a job's, a step's or a node's write: an assignment, augmented
assignment or ``del`` whose target reaches a field of a ``pb.Job``, ``pb.JobSpec`` or
``pb.Step`` (the names come from the proto descriptors, so a new field is covered),
or one of the fields ``ctld/model/nodestate.py`` owns on a ``NodeRecord``; a mutating call
on such a field (``job.usage.CopyFrom``, ``job.steps.append``, ``job.ClearField``...);
a ``setattr`` on such an object. Whose field it is comes from a small reading of each
function (no imports, no type checker):

- a name annotated ``pb.Job``/``pb.Step``/``NodeRecord`` (a parameter or a variable) is
  one; one annotated with any other type is not (``pb.JobSpec``: a request, not yet a
  job's: a stored spec is only reached as ``<job>.spec``);
- a name bound in the function to a new message (``pb.X(...)``), to a part of one, or
  looped over one is a fresh object: building it is no change (``bare = pb.Job();
  bare.CopyFrom(job)`` too);
- ``X.jobs[...]``, ``X.jobs.get(...)``, ``X.job(...)``, a loop over ``X.jobs.values()``
  is a job; the same with ``nodes``/``node`` a node; a part of a job (``job.spec``,
  ``job.steps[0]``) is the job's;
- ``self`` is a node inside ``class NodeRecord`` (outside ``__post_init__``); any other
  ``self`` and its attributes are ctld's own parts (``self.state.version``);
- any other name, unknown: its write counts when the field's name is a job's or a
  node's (the conservative side: a false alarm names the line, a miss would not).
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

from corral.wire import corral_pb2 as pb
from ctld.model import nodestate

JOB_FIELDS = frozenset(f.name for m in (pb.Job, pb.JobSpec, pb.Step) for f in m.DESCRIPTOR.fields)
NODE_FIELDS = nodestate.FIELDS
MUTATORS = frozenset(
    {"CopyFrom", "MergeFrom", "ClearField", "Clear", "SetInParent", "MergeFromString"}
    | {"ParseFromString", "append", "extend", "add", "remove", "pop", "insert", "sort"}
)

JOB, STEP, NODE, FRESH, OTHER, UNKNOWN = "job", "step", "node", "fresh", "other", "unknown"
_TYPES = {"pb.Job": JOB, "pb.Step": STEP, "NodeRecord": NODE}
# (whose, the job's or node's own field it was reached through: "" for the object)
Kind = tuple[str, str]


@dataclass(frozen=True)
class Write:
    """One write: the line, whose (``job`` or ``node``) and the field written."""

    path: str
    line: int
    kind: str
    field: str
    function: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: writes {self.kind} field .{self.field} ({self.function})"


def writes(path: pathlib.Path, name: str | None = None) -> list[Write]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[Write] = []
    for cls, fn in _functions(tree):
        out += _Reader(name or path.name, cls, fn).run()
    return out


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    def walk(
        node: ast.AST, cls: str
    ) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(child, child.name)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield cls, child
                yield from walk(child, cls)  # nested functions: read on their own
            else:
                yield from walk(child, cls)

    yield from walk(tree, "")


class _Reader:
    def __init__(self, path: str, cls: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.path, self.cls, self.fn = path, cls, fn
        self.kinds: dict[str, Kind] = {}
        self.found: list[Write] = []

    def run(self) -> list[Write]:
        fn = self.fn
        for arg in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
            if arg.arg == "self":
                construct = fn.name in ("__init__", "__post_init__")
                whose = NODE if self.cls == "NodeRecord" and not construct else OTHER
                self.kinds["self"] = (whose, "")
            elif arg.annotation is not None:
                self.kinds[arg.arg] = (_TYPES.get(ast.unparse(arg.annotation), OTHER), "")
        for node in self._body(fn):
            self._bind(node)
            self._check(node)
        return self.found

    def _body(self, fn: ast.AST) -> Iterator[ast.AST]:
        """The function's own nodes in source order (not its nested functions')."""
        for child in ast.iter_child_nodes(fn):
            if isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef
            ):
                continue
            yield child
            yield from self._body(child)

    # ------------------------------------------------------------ what a name holds

    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            self.kinds[node.target.id] = (_TYPES.get(ast.unparse(node.annotation), OTHER), "")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                self.kinds[target.id] = self.kind(node.value)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension) and isinstance(
            node.target, ast.Name
        ):
            self.kinds[node.target.id] = self._element(node.iter)
        elif isinstance(node, ast.NamedExpr):
            self.kinds[node.target.id] = self.kind(node.value)

    def kind(self, expr: ast.expr) -> Kind:
        """Whose object ``expr`` is: a job's, a node's, a fresh one, ctld's own, unknown."""
        if isinstance(expr, ast.Name):
            return self.kinds.get(expr.id, (UNKNOWN, ""))
        if isinstance(expr, ast.Call):
            return self._made(expr)
        if isinstance(expr, ast.Subscript):
            owner = expr.value
            if (
                isinstance(owner, ast.Attribute)
                and owner.attr in ("jobs", "nodes")
                and self.kind(owner.value)[0] in (OTHER, UNKNOWN)  # st.jobs[i]
            ):
                return (JOB if owner.attr == "jobs" else NODE, "")
            return self._part(owner)
        if isinstance(expr, ast.Attribute):
            return self._part(expr)
        if isinstance(expr, ast.ListComp | ast.GeneratorExp):
            return self.kind(expr.elt) if self.kind(expr.elt)[0] == FRESH else (UNKNOWN, "")
        return (UNKNOWN, "")

    def _made(self, call: ast.Call) -> Kind:
        """What a call returns."""
        func = call.func
        if not isinstance(func, ast.Attribute):
            return (UNKNOWN, "")
        owner = func.value
        if (isinstance(owner, ast.Name) and owner.id == "pb") or func.attr == "to_wire":
            return (FRESH, "")  # a new message
        if func.attr in ("job", "node"):  # st.job(id), st.node(name)
            return (JOB if func.attr == "job" else NODE, "")
        if func.attr == "get" and isinstance(owner, ast.Attribute):
            if owner.attr in ("jobs", "nodes"):
                return (JOB if owner.attr == "jobs" else NODE, "")
            return self._part(owner)
        if func.attr == "add":  # a new item of a repeated field: its owner's
            return self._part(owner)
        return (UNKNOWN, "")

    def _part(self, expr: ast.expr) -> Kind:
        """Whose a part reached through ``expr`` is (``job.spec``: the job's, by .spec)."""
        chain: list[str] = []
        base = expr
        while isinstance(base, ast.Attribute | ast.Subscript):
            if isinstance(base, ast.Attribute):
                chain.append(base.attr)
            base = base.value
        whose, top = self.kind(base)
        if whose in (JOB, STEP, NODE) and not top and chain:
            top = chain[-1]  # the outermost field
        return (whose, top)

    def _element(self, it: ast.expr) -> Kind:
        """What a loop over ``it`` yields."""
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
            owner = it.func.value
            if it.func.attr == "values" and isinstance(owner, ast.Attribute):
                # ctld keeps jobs and nodes in maps of those names only
                return {"jobs": (JOB, ""), "nodes": (NODE, "")}.get(owner.attr, (OTHER, ""))
        if isinstance(it, ast.Attribute | ast.Subscript | ast.Name):
            whose, top = self._part(it) if not isinstance(it, ast.Name) else self.kind(it)
            if whose in (FRESH, JOB, STEP):
                return (whose, top)
        return (UNKNOWN, "")

    # ------------------------------------------------------------ writes

    def _check(self, node: ast.AST) -> None:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for t in _flat(targets):
            if isinstance(t, ast.Attribute):
                self._field(node, t.value, t.attr)
            elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute):
                self._field(node, t.value.value, t.value.attr)  # job.waits_for[:] = ...
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in MUTATORS:
                owner = func.value
                if isinstance(owner, ast.Attribute):
                    self._field(node, owner.value, owner.attr)  # job.usage.CopyFrom(...)
                elif func.attr in ("ClearField", "CopyFrom", "MergeFrom", "Clear"):
                    field = _literal(node.args[:1]) if func.attr == "ClearField" else "*"
                    self._field(node, owner, str(field or "*"))  # job.ClearField("x")
            if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
                self._field(node, node.args[0], str(_literal(node.args[1:2]) or "*"))

    def _field(self, node: ast.AST, owner: ast.expr, field: str) -> None:
        whose, top = self.kind(owner)
        if whose in (FRESH, OTHER):
            return
        if whose == UNKNOWN:
            if field in JOB_FIELDS:
                whose = JOB
            elif field in NODE_FIELDS:
                whose = NODE
            else:
                return
        field = top or field
        if whose == NODE and field not in NODE_FIELDS and field != "*":
            return  # its allocations, heartbeat marks: bookkeeping, not its state
        line = getattr(node, "lineno", 0)
        self.found.append(Write(self.path, line, whose, field, self.fn.name))


def _flat(targets: list[ast.expr]) -> Iterator[ast.expr]:
    for t in targets:
        if isinstance(t, ast.Tuple | ast.List):
            yield from _flat(list(t.elts))
        elif isinstance(t, ast.Starred):
            yield from _flat([t.value])
        else:
            yield t


def _literal(args: list[ast.expr]) -> object:
    return args[0].value if args and isinstance(args[0], ast.Constant) else None
