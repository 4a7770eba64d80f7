// A Server-Sent Events stream read with fetch(), so that its request carries the
// session token in an Authorization header: EventSource cannot send one, and the
// session is never a cookie (docs/security.md, "Browser sessions"). The stream is
// parsed as the SSE standard says: a line ends with CR, LF or CR LF; "event:" names the
// event, each "data:" adds a line to it, a blank line sends it, ":" starts a comment.

const LINE_END = /\r\n|\r|\n/g;

// Reads ``url`` until it ends: calls onEvent("open", "") once it answers, then
// onEvent(name, data) per event. Resolves to the answer's status when it was not 200,
// to 0 when the stream ended; rejects when the connection failed or was aborted.
export async function follow(url, headers, onEvent, signal) {
  const resp = await fetch(url, { headers, cache: "no-store", signal });
  if (resp.status !== 200) return resp.status;
  onEvent("open", "");
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let name = "";
  let data = [];
  const line = (text) => {
    if (text === "") {
      if (data.length) onEvent(name || "message", data.join("\n"));
      name = "";
      data = [];
      return;
    }
    if (text.startsWith(":")) return;
    const colon = text.indexOf(":");
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") name = value;
    else if (field === "data") data.push(value);
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return 0;
    buffer += value;
    let start = 0;
    LINE_END.lastIndex = 0;
    for (let m = LINE_END.exec(buffer); m !== null; m = LINE_END.exec(buffer)) {
      // a CR that ends the chunk may be the first half of a CR LF: wait for the next
      if (m[0] === "\r" && m.index === buffer.length - 1) break;
      line(buffer.slice(start, m.index));
      start = m.index + m[0].length;
    }
    buffer = buffer.slice(start);
  }
}
