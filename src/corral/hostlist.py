"""Slurm hostlist expressions: ``node[01-04,07]``, ``gpu[1-2]-ib[0-1]``, comma lists.

``expand`` turns an expression into names in order; ``compress`` turns names back into
the shortest expression that keeps their order, as Slurm prints them. Parsed by hand,
not with ``re``: sinfo imports this at every start-up.
"""

from __future__ import annotations

from itertools import product

from corral.errors import InvalidRequest

MAX_HOSTS = 1_000_000  # an expression larger than this is a mistake or an attack


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise InvalidRequest(f"invalid hostlist {expr!r}: nested brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise InvalidRequest(f"invalid hostlist {expr!r}: unbalanced ']'")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth != 0:
        raise InvalidRequest(f"invalid hostlist {expr!r}: unbalanced '['")
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_range(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        lo_s, dash, hi_s = item.partition("-")  # N or N-M
        if not _digits(lo_s) or (dash and not _digits(hi_s)):
            raise InvalidRequest(f"invalid hostlist {expr!r}: bad range {item!r}")
        hi_s = hi_s if dash else lo_s
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise InvalidRequest(f"invalid hostlist {expr!r}: range {item!r} runs backwards")
        if hi - lo + len(out) > MAX_HOSTS:
            raise InvalidRequest(f"invalid hostlist {expr!r}: more than {MAX_HOSTS} hosts")
        width = len(lo_s) if lo_s.startswith("0") or len(lo_s) == len(hi_s) else 0
        out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return out


def expand(expr: str) -> list[str]:
    """All host names of ``expr``, in order, duplicates kept out."""
    names: list[str] = []
    seen: set[str] = set()
    for part in _split_top(expr):
        pieces = _bracketed(part)
        choices: list[list[str]] = []
        for piece in pieces:
            if piece.startswith("["):
                choices.append(_expand_range(piece[1:-1], expr))
            elif piece:
                if "[" in piece or "]" in piece:
                    raise InvalidRequest(f"invalid hostlist {expr!r}")
                choices.append([piece])
        total = 1
        for choice in choices:  # refuse a cartesian product before building it
            total *= len(choice)
            if total > MAX_HOSTS:
                raise InvalidRequest(f"invalid hostlist {expr!r}: more than {MAX_HOSTS} hosts")
        for combo in product(*choices):
            name = "".join(combo)
            if name not in seen:
                seen.add(name)
                names.append(name)
            if len(names) > MAX_HOSTS:
                raise InvalidRequest(f"invalid hostlist {expr!r}: more than {MAX_HOSTS} hosts")
    return names


def _digits(text: str) -> bool:
    """One or more ASCII digits."""
    return text.isascii() and text.isdigit()


def _bracketed(part: str) -> list[str]:
    """``part`` cut around each ``[...]``: text, bracket, text, ... (re.split's list for
    the pattern ``(\\[[^\\]]*\\])``)."""
    pieces: list[str] = []
    i = 0
    while (start := part.find("[", i)) >= 0 and (end := part.find("]", start + 1)) >= 0:
        pieces += [part[i:start], part[start : end + 1]]
        i = end + 1
    pieces.append(part[i:])
    return pieces


def _numeric_tail(name: str) -> tuple[str, str] | None:
    """A name's prefix and trailing ASCII digits (``node``, ``012`` for ``node012``),
    None without digits: what ``^(.*?)([0-9]+)$`` matched (its ``.`` stops at a newline,
    its ``$`` also matches before a final one)."""
    body = name[:-1] if name.endswith("\n") else name
    prefix = body.rstrip("0123456789")
    if len(prefix) == len(body) or "\n" in prefix:
        return None
    return prefix, body[len(prefix) :]


class _Run:
    # a plain class: sinfo imports this module, and dataclasses costs ~6 ms of start-up
    __slots__ = ("numbers", "prefix", "width")

    def __init__(self, prefix: str, width: int, numbers: list[int]) -> None:
        self.prefix = prefix
        self.width = width
        self.numbers = numbers


def compress(names: list[str]) -> str:
    """The compact expression for ``names`` (first-seen order kept): a[1-3,5],b."""
    items: list[str | _Run] = []
    runs: dict[tuple[str, int], _Run] = {}
    for name in names:
        tail = _numeric_tail(name)
        if tail is None:
            items.append(name)
            continue
        prefix, digits = tail
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        if not width and (prefix, len(digits)) in runs:
            width = len(digits)  # 1000 after 0999: the same width, one range (Slurm's)
        run = runs.get((prefix, width))
        if run is None:
            run = runs[(prefix, width)] = _Run(prefix, width, [])
            items.append(run)
        run.numbers.append(int(digits))
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.append(item)
        elif len(item.numbers) == 1:
            out.append(f"{item.prefix}{str(item.numbers[0]).zfill(item.width)}")
        else:
            out.append(f"{item.prefix}[{_ranges(sorted(set(item.numbers)), item.width)}]")
    return ",".join(out)


def _ranges(numbers: list[int], width: int) -> str:
    spans: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        lo, hi = str(start).zfill(width), str(prev).zfill(width)
        spans.append(lo if start == prev else f"{lo}-{hi}")
        if n is not None:
            start = prev = n
    return ",".join(spans)


def ranged(names: list[str]) -> str:
    """Slurm's ``scontrol show hostlist``: names in their given order, duplicates kept;
    neighbours that continue a run merge (``n1,n2,n3`` -> ``n[1-3]``), and runs that
    follow each other with one prefix share brackets (``n3,n1,n2`` -> ``n[3,1-2]``)."""
    groups: list[tuple[str, int, list[list[int]]] | str] = []
    for name in names:
        tail = _numeric_tail(name)
        if tail is None:
            groups.append(name)
            continue
        prefix, digits = tail
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        n = int(digits)
        last = groups[-1] if groups else None
        if isinstance(last, tuple) and last[:2] == (prefix, width):
            spans = last[2]
            if spans[-1][1] + 1 == n:
                spans[-1][1] = n
            else:
                spans.append([n, n])
        else:
            groups.append((prefix, width, [[n, n]]))
    out: list[str] = []
    for g in groups:
        if isinstance(g, str):
            out.append(g)
            continue
        prefix, width, spans = g
        text = ",".join(
            str(lo).zfill(width) if lo == hi else f"{str(lo).zfill(width)}-{str(hi).zfill(width)}"
            for lo, hi in spans
        )
        single = len(spans) == 1 and spans[0][0] == spans[0][1]
        out.append(f"{prefix}{text}" if single else f"{prefix}[{text}]")
    return ",".join(out)


def sort_key(name: str) -> tuple[str, int, int, str]:
    """Slurm's hostlist order: by prefix, then number (``n2`` before ``n10``)."""
    tail = _numeric_tail(name)
    if tail is None:
        return (name, -1, 0, name)
    prefix, digits = tail
    return (prefix, len(digits) if digits.startswith("0") else 0, int(digits), name)
