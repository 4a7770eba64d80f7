// ctld's web page (docs/web.md). Every URL serves the same shell; this script brings
// its view. The session token lives in this origin's localStorage (scheme, host and
// port: no other port of the host can read it) and goes to ctld in an Authorization
// header; it is never a cookie, which a browser would send to every port of the host
// (docs/security.md, "Browser sessions"). Plain JavaScript, no build.
import { follow } from "./stream.js";

const KEY = "corral-session";
const RETRY_MS = 3000;
const main = document.getElementById("view");
const nav = document.querySelector("nav");
const cluster = main.dataset.cluster;
const here = () => location.pathname + location.search;

const token = () => localStorage.getItem(KEY);
const auth = (session) => ({ Authorization: "Bearer " + session });
const ENDED = "Your session has ended: sign in again.";

function showSignIn(note) {
  stopLive();
  nav.hidden = true;
  document.title = "Sign in - " + cluster;
  const panel = document.getElementById("signin-template").content.cloneNode(true);
  main.replaceChildren(panel);
  if (note) {
    const p = document.getElementById("signin-note");
    p.textContent = note;
    p.hidden = false;
  }
}

// ctld refused ``refused``: it is forgotten, unless another tab has since stored a
// newer session, which the page then uses
function signedOut(refused, note) {
  if (token() === refused) localStorage.removeItem(KEY);
  if (token()) load();
  else showSignIn(note);
}

async function postJson(url, body) {
  try {
    const resp = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    return { ok: resp.ok, status: resp.status, body: await resp.json() };
  } catch (error) {
    return { ok: false, status: 0, body: { error: "ctld cannot be reached: " + error } };
  }
}

// ---------------------------------------------------------------- signing in

async function signIn() {
  const login = new URLSearchParams(location.hash.slice(1)).get("token");
  // the token leaves the address bar (and so any bookmark or shared screen) at once
  if (location.hash) history.replaceState(null, "", location.pathname);
  showSignIn();
  if (!login) return;
  const who = await postJson("/login/who", { token: login });
  if (!who.ok) return showSignIn(who.body.error);
  const button = document.getElementById("signin");
  button.textContent = "Sign in as " + who.body.user;
  button.hidden = false;
  button.addEventListener("click", async () => {
    button.disabled = true;
    const got = await postJson("/login", { token: login });
    if (!got.ok) return showSignIn(got.body.error);
    localStorage.setItem(KEY, got.body.session);
    location.replace("/");
  }, { once: true });
}

// ---------------------------------------------------------------- the view

let waiting = null; // an update held back while the user types in a form of the view

const typing = () => {
  const el = document.activeElement;
  return el && main.contains(el) && ["INPUT", "SELECT", "TEXTAREA"].includes(el.tagName);
};

function apply(html) {
  const open = new Set(
    [...main.querySelectorAll("details[open] > summary")].map((s) => s.textContent));
  main.innerHTML = html; // ctld's markup: every text in it escaped (ctld/web/html.py)
  for (const s of main.querySelectorAll("details > summary")) {
    if (open.has(s.textContent)) s.parentElement.open = true;
  }
  main.dataset.updated = String(Date.now());
}

function update(html) {
  if (typing()) waiting = html;
  else apply(html);
}

main.addEventListener("focusout", () => {
  setTimeout(() => {
    if (waiting !== null && !typing()) {
      apply(waiting);
      waiting = null;
    }
  }, 0);
});

function show(view) {
  document.title = view.title + " - " + cluster;
  document.getElementById("user").textContent = view.user || "";
  nav.hidden = false;
  update(view.html);
}

async function load() {
  const session = token();
  if (!session) return showSignIn();
  let resp;
  try {
    resp = await fetch("/view" + here(), { headers: auth(session), cache: "no-store" });
  } catch {
    document.body.classList.remove("live");
    setTimeout(load, RETRY_MS); // ctld is restarting, or the network is away
    return;
  }
  if (resp.status === 401) return signedOut(session, ENDED);
  const view = await resp.json();
  show(view);
  if (resp.ok) startLive(session, view.digest);
  else if (resp.status === 503) setTimeout(load, RETRY_MS); // a standby: until it serves
}

// ---------------------------------------------------------------- live

let live = null; // the open stream's AbortController

function stopLive() {
  if (live) live.abort();
  live = null;
  document.body.classList.remove("live");
}

function startLive(session, digest) {
  stopLive();
  const ctrl = new AbortController();
  live = ctrl;
  const url = "/events?view=" + encodeURIComponent(here()) +
    "&digest=" + encodeURIComponent(digest || "");
  const onEvent = (name, data) => {
    if (ctrl.signal.aborted) return;
    if (name === "open") document.body.classList.add("live");
    else if (name === "view") update(data);
    else if (name === "logout") ctrl.abort(); // signed out, or ctld stopped serving
  };
  follow(url, auth(session), onEvent, ctrl.signal)
    .catch(() => 0)
    .then((status) => {
      if (live !== ctrl) return; // replaced by a newer stream
      live = null;
      document.body.classList.remove("live");
      if (status === 401) return signedOut(session, ENDED);
      // ended: ask again (load says whether the session or ctld is still there)
      setTimeout(() => live === null && load(), ctrl.signal.aborted ? 0 : RETRY_MS);
    });
}

// ---------------------------------------------------------------- actions

async function logout() {
  const session = token();
  let resp;
  try {
    resp = await fetch("/logout", { method: "POST", headers: auth(session) });
  } catch {
    return; // ctld not reached: the session may still count, so it is not forgotten
  }
  if (resp.ok || resp.status === 401) {
    localStorage.removeItem(KEY);
    showSignIn();
  } else {
    show(await resp.json()); // why it was not kept
  }
}

document.addEventListener("submit", async (event) => {
  const form = event.target;
  if (form.method !== "post") return; // the filters: GET forms, they navigate
  event.preventDefault();
  if (form.classList.contains("logout")) return logout();
  const session = token();
  const resp = await fetch(form.action, { method: "POST", headers: auth(session) });
  if (resp.status === 401) return signedOut(session, ENDED);
  const answer = await resp.json();
  if (resp.ok) load();
  else show(answer);
});

// a filter's select applies at once (the form's button does it too)
document.addEventListener("change", (event) => {
  const form = event.target.closest("form.filters");
  if (form && event.target.tagName === "SELECT") form.requestSubmit();
});

// signed in or out in another tab of this browser
window.addEventListener("storage", (event) => {
  if (event.key !== KEY || location.pathname === "/login") return;
  if (event.newValue) load();
  else showSignIn();
});

if (location.pathname === "/login") signIn();
else load();
