"""HTML that cannot forget to escape: text is escaped unless it is already ``Html``.

Every page is built from ``el`` (an element) and ``Html`` fragments. A ``str`` child or
attribute value is always escaped, so a job named ``<script>`` renders as text; only
what this package built (``Html``) passes through as markup.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape

Child = "Html | str | int | float | None | Iterable[Html | str | int | float | None]"


class Html(str):
    """Markup this package built (never user input)."""

    __slots__ = ()


def esc(value: object) -> Html:
    if isinstance(value, Html):
        return value
    return Html(escape(str(value), quote=True))


def _children(children: Iterable[object], out: list[str]) -> None:
    for c in children:
        if c is None or c is False:
            continue
        if isinstance(c, Html):
            out.append(c)
        elif isinstance(c, str | int | float):
            out.append(escape(str(c), quote=False))
        else:
            _children(c, out)  # type: ignore[arg-type]


_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "col"})


def el(tag: str, *children: object, **attrs: object) -> Html:
    """``<tag attrs>children</tag>``. Attribute names: ``class_`` -> class, ``data_x``
    -> data-x; True -> a bare attribute, None/False -> left out."""
    parts = ["<", tag]
    for name, value in attrs.items():
        if value is None or value is False:
            continue
        key = name.rstrip("_").replace("_", "-")
        if value is True:
            parts.append(f" {key}")
        else:
            parts.append(f' {key}="{escape(str(value), quote=True)}"')
    parts.append(">")
    if tag in _VOID:
        return Html("".join(parts))
    _children(children, parts)
    parts.append(f"</{tag}>")
    return Html("".join(parts))


def join(items: Iterable[object]) -> Html:
    out: list[str] = []
    _children(items, out)
    return Html("".join(out))
