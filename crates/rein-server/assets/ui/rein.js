// The Control UI's own script: the page's live stream, deadlines that count
// down, running steps' times that count up, and a chosen plan file filling the plan's text box. Everything else
// is htmx.
"use strict";

// One stream per page (`/ui/live`); each `changed` event asks every live part
// of the page (hx-trigger="rein:changed") to fetch its content again. The
// stream is closed when the page is hidden: a page kept in the back/forward
// cache would otherwise hold one of the six connections a browser opens to
// one server, and after a few visits every page would wait for a free one.
let live = null;

function liveParts() {
  for (const el of document.querySelectorAll("[data-live-part]")) {
    htmx.trigger(el, "rein:changed");
  }
}

function connect() {
  const source = document.body.dataset.live;
  if (live || !source) return;
  live = new EventSource(source);
  live.addEventListener("changed", liveParts);
  // What changed between the page's render and the stream's start (or
  // while it reconnected) sent no event this page heard: fetch once now.
  live.addEventListener("open", liveParts);
}

window.addEventListener("pagehide", () => {
  if (live) {
    live.close();
    live = null;
  }
});
window.addEventListener("pageshow", (event) => {
  connect();
  // Shown again from the cache: what changed meanwhile was not heard.
  if (event.persisted) liveParts();
});
connect();

function countDown() {
  for (const el of document.querySelectorAll("time.deadline")) {
    const left = Math.round((Date.parse(el.getAttribute("datetime")) - Date.now()) / 1000);
    if (Number.isNaN(left)) continue;
    const abs = Math.abs(left);
    const text = `${Math.floor(abs / 60)}m ${String(abs % 60).padStart(2, "0")}s`;
    el.textContent = left >= 0 ? `in ${text}` : `${text} ago`;
  }
  // A running step's time so far.
  for (const el of document.querySelectorAll("time.elapsed")) {
    const gone = Math.round((Date.now() - Date.parse(el.getAttribute("datetime"))) / 1000);
    if (Number.isNaN(gone)) continue;
    const abs = Math.max(0, gone);
    const h = Math.floor(abs / 3600);
    const m = Math.floor((abs % 3600) / 60);
    const s = String(abs % 60).padStart(2, "0");
    el.textContent = h > 0 ? `${h}h ${m}m ${s}s` : m > 0 ? `${m}m ${s}s` : `${abs}s`;
  }
}
setInterval(countDown, 1000);
document.addEventListener("htmx:afterSettle", countDown);
countDown();

document.addEventListener("change", (event) => {
  const input = event.target;
  if (!(input instanceof HTMLInputElement) || !input.dataset.fills || !input.files?.length) return;
  const target = document.getElementById(input.dataset.fills);
  input.files[0].text().then((text) => { target.value = text; });
});
