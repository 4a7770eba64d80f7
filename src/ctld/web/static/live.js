// Live updates for ctld's web page (docs/web.md): one EventSource per page; a "view"
// event carries the page's <main> anew, rendered by ctld. Plain JavaScript, no build.
const main = document.getElementById("view");

// a filter's select applies at once (the form's button still works without JS)
document.addEventListener("change", (event) => {
  const form = event.target.closest("form.filters");
  if (form && event.target.tagName === "SELECT") form.requestSubmit();
});

if (main && main.dataset.live) {
  const view = location.pathname + location.search;
  const url = "/events?view=" + encodeURIComponent(view) +
    "&digest=" + encodeURIComponent(main.dataset.digest || "");
  const source = new EventSource(url);
  let waiting = null; // an update held back while the user types in a form of the view

  const typing = () => {
    const el = document.activeElement;
    return el && main.contains(el) && ["INPUT", "SELECT", "TEXTAREA"].includes(el.tagName);
  };
  const apply = (html) => {
    const open = new Set(
      [...main.querySelectorAll("details[open] > summary")].map((s) => s.textContent));
    main.innerHTML = html;
    for (const s of main.querySelectorAll("details > summary")) {
      if (open.has(s.textContent)) s.parentElement.open = true;
    }
    main.dataset.updated = String(Date.now());
  };

  source.addEventListener("open", () => document.body.classList.add("live"));
  source.addEventListener("view", (event) => {
    if (typing()) waiting = event.data;
    else apply(event.data);
  });
  main.addEventListener("focusout", () => {
    setTimeout(() => {
      if (waiting !== null && !typing()) {
        apply(waiting);
        waiting = null;
      }
    }, 0);
  });
  source.addEventListener("logout", () => {
    source.close();
    location.reload();
  });
  source.addEventListener("error", () => {
    document.body.classList.remove("live");
    // closed for good (signed out, ctld gone for long): the page itself says why
    if (source.readyState === EventSource.CLOSED) setTimeout(() => location.reload(), 5000);
  });
}
