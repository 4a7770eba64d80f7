"""Small charts as inline SVG, drawn on the server (docs/web.md says why: no charting
library to vendor and update, nothing for the Content-Security-Policy to allow, and a
chart that is in the page the moment the HTML is).

Colours come from the stylesheet (classes ``c0`` .. ``c7``), never inline styles.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from ctld.web.html import Html, el

W, H = 720, 200  # the viewBox; the SVG scales to its container (at most this wide)
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 8, 22
COLOURS = 8


def _x(t: float, t0: float, t1: float) -> float:
    span = (t1 - t0) or 1.0
    return LEFT + (t - t0) / span * (W - LEFT - RIGHT)


def _y(v: float, top: float) -> float:
    top = top or 1.0
    return H - BOTTOM - min(max(v, 0.0), top) / top * (H - TOP - BOTTOM)


def _clock(t: float, span: float) -> str:
    return time.strftime("%H:%M" if span < 2 * 86400 else "%m-%d", time.localtime(t))


def _axes(t0: float, t1: float, top: float, unit: str) -> list[Html]:
    out = [
        el("line", x1=LEFT, y1=H - BOTTOM, x2=W - RIGHT, y2=H - BOTTOM, class_="axis"),
        el("line", x1=LEFT, y1=TOP, x2=LEFT, y2=H - BOTTOM, class_="axis"),
    ]
    for frac in (0.0, 0.5, 1.0):
        y = _y(top * frac, top)
        out.append(el("text", f"{top * frac:.0f}{unit}", x=LEFT - 4, y=y + 4, class_="tick end"))
        if frac:
            out.append(el("line", x1=LEFT, y1=y, x2=W - RIGHT, y2=y, class_="grid"))
    for frac in (0.0, 0.5, 1.0):
        t = t0 + (t1 - t0) * frac
        anchor = "start" if frac == 0 else "end" if frac == 1 else "middle"
        out.append(
            el("text", _clock(t, t1 - t0), x=_x(t, t0, t1), y=H - 6, class_=f"tick {anchor}")
        )
    return out


def line_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    top: float,
    unit: str,
    label: str,
) -> Html:
    """One line per (name, [(time, value)]), on a shared time axis from 0 to ``top``."""
    pts = [p for _, s in series for p in s]
    if not pts:
        return el("p", "No samples yet.", class_="muted")
    t0, t1 = min(p[0] for p in pts), max(p[0] for p in pts)
    if t1 - t0 < 1:
        t1 = t0 + 1
    parts = _axes(t0, t1, top, unit)
    legend = []
    for i, (name, s) in enumerate(series):
        if len(s) == 1:  # one sample so far: a dot
            ((t, v),) = s
            x, y = f"{_x(t, t0, t1):.1f}", f"{_y(v, top):.1f}"
            parts.append(el("circle", cx=x, cy=y, r=3, class_=f"c{i % COLOURS}"))
        else:
            coords = " ".join(f"{_x(t, t0, t1):.1f},{_y(v, top):.1f}" for t, v in s)
            parts.append(el("polyline", points=coords, class_=f"line c{i % COLOURS}"))
        legend.append(el("span", name, class_=f"key c{i % COLOURS}"))
    svg = el("svg", el("title", label), *parts, viewBox=f"0 0 {W} {H}", role="img", class_="chart")
    return el("figure", svg, el("figcaption", label, " ", *legend))


def stacked_bars(
    labels: Sequence[str], stacks: Sequence[tuple[str, Sequence[float]]], *, unit: str, label: str
) -> Html:
    """One bar per label, stacked by (name, values per label)."""
    totals = [sum(s[1][i] for s in stacks) for i in range(len(labels))]
    top = max(totals, default=0.0)
    if not labels or top <= 0:
        return el("p", "Nothing used in this window.", class_="muted")
    top = _nice(top)
    n = len(labels)
    slot = (W - LEFT - RIGHT) / n
    bar = max(1.0, slot * 0.8)
    parts: list[Html] = [
        el("line", x1=LEFT, y1=H - BOTTOM, x2=W - RIGHT, y2=H - BOTTOM, class_="axis"),
    ]
    for frac in (0.5, 1.0):
        y = _y(top * frac, top)
        parts.append(el("line", x1=LEFT, y1=y, x2=W - RIGHT, y2=y, class_="grid"))
        parts.append(el("text", f"{top * frac:.4g}", x=LEFT - 4, y=y + 4, class_="tick end"))
    step = max(1, n // 8)
    for i, text in enumerate(labels):
        x = LEFT + i * slot + (slot - bar) / 2
        base = 0.0
        for k, (name, values) in enumerate(stacks):
            v = values[i]
            if v <= 0:
                continue
            y0, y1 = _y(base, top), _y(base + v, top)
            rect = el(
                "rect",
                el("title", f"{text} {name}: {v:.2f} {unit}"),
                x=f"{x:.1f}",
                y=f"{y1:.1f}",
                width=f"{bar:.1f}",
                height=f"{max(0.5, y0 - y1):.1f}",
                class_=f"bar c{k % COLOURS}",
            )
            parts.append(rect)
            base += v
        if i % step == 0:
            parts.append(el("text", text, x=x + bar / 2, y=H - 6, class_="tick middle"))
    legend = [el("span", name, class_=f"key c{k % COLOURS}") for k, (name, _) in enumerate(stacks)]
    svg = el("svg", el("title", label), *parts, viewBox=f"0 0 {W} {H}", role="img", class_="chart")
    return el("figure", svg, el("figcaption", f"{label} ({unit}) ", *legend))


def _nice(v: float) -> float:
    """The next round number at or above ``v`` (1, 2, 5 x 10^k)."""
    mag = 10.0 ** math.floor(math.log10(v))
    for m in (1, 2, 5, 10):
        if v <= m * mag:
            return m * mag
    return v


def timeline(
    rows: Sequence[tuple[str, float, float, str]], *, t0: float, t1: float, now: float
) -> Html:
    """One bar per (name, start, end, css class) between t0 and t1; a line at now."""
    if not rows:
        return el("p", "No reservations.", class_="muted")
    row_h = 22
    height = TOP + row_h * len(rows) + BOTTOM
    parts: list[Html] = []
    for i, (name, start, end, cls) in enumerate(rows):
        y = TOP + i * row_h
        x0 = _x(max(start, t0), t0, t1)
        x1 = _x(min(end if end > 0 else t1, t1), t0, t1)
        parts.append(
            el(
                "rect",
                el("title", name),
                x=f"{x0:.1f}",
                y=y + 3,
                width=f"{max(2.0, x1 - x0):.1f}",
                height=row_h - 6,
                class_=f"bar {cls}",
            )
        )
        inside = x1 - x0 > 8 * len(name)  # a short bar gets its name beside it
        parts.append(
            el(
                "text",
                name,
                x=f"{x0 + 4 if inside else x1 + 4:.1f}",
                y=y + row_h - 7,
                class_="tick inbar" if inside else "tick",
            )
        )
    xn = _x(now, t0, t1)
    parts.append(el("line", x1=xn, y1=TOP, x2=xn, y2=height - BOTTOM, class_="now"))
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        t = t0 + (t1 - t0) * frac
        anchor = "start" if frac == 0 else "end" if frac == 1 else "middle"
        text = time.strftime("%m-%d %H:%M", time.localtime(t))
        parts.append(el("text", text, x=_x(t, t0, t1), y=height - 6, class_=f"tick {anchor}"))
    return el(
        "svg",
        el("title", "Reservations over time"),
        *parts,
        viewBox=f"0 0 {W} {height}",
        role="img",
        class_="chart",
    )
