"""A Server-Sent Events reader as a browser's EventSource reads a stream (WHATWG HTML,
"Parsing an event stream"), for the tests of ctld's live stream: CRLF, a lone CR and a
lone LF each end a line; an empty line dispatches the event (when it has data)."""

from __future__ import annotations

import re

LINE_END = re.compile(r"\r\n|\r|\n")


def events(stream: str) -> list[tuple[str, str]]:
    """(type, data) of every event the whole lines of ``stream`` dispatch."""
    found: list[tuple[str, str]] = []
    if stream.startswith("\ufeff"):
        stream = stream[1:]
    data: list[str] = []
    kind = ""
    for line in LINE_END.split(stream)[:-1]:  # the last piece has no line end yet
        if not line:
            if data:
                found.append((kind or "message", "\n".join(data)))
            data, kind = [], ""
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            kind = value
        elif name == "data":
            data.append(value)
    return found
