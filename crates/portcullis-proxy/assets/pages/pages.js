// Shared helpers of the portcullis pages. Plain browser JavaScript, no build step.
"use strict";

const Tg = (() => {
  // Every call to the gateway is bounded: a hung request is aborted after this long.
  const FETCH_TIMEOUT_MS = 10000;
  // Browser clock minus gateway clock, from the Date header of the last answer. Used
  // only when the two disagree by more than the Date header's own precision.
  let skewMs = 0;

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("data-") || k === "title" || k === "type" || k === "colspan" || k === "aria-label") e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function num(n) {
    if (n === null || n === undefined) return "—";
    return Number(n).toLocaleString("en-US");
  }

  // "1 h 02 m 05 s", "59 s"; 0 and below: "now".
  function duration(secs) {
    secs = Math.ceil(secs);
    if (!(secs > 0)) return "now";
    const d = Math.floor(secs / 86400), h = Math.floor(secs % 86400 / 3600);
    const m = Math.floor(secs % 3600 / 60), s = secs % 60;
    const pad = (x) => String(x).padStart(2, "0");
    if (d > 0) return `${d} d ${pad(h)} h ${pad(m)} m`;
    if (h > 0) return `${h} h ${pad(m)} m ${pad(s)} s`;
    if (m > 0) return `${m} m ${pad(s)} s`;
    return `${s} s`;
  }

  // A window length in the largest unit that divides it: "1 min", "1 h", "30 s".
  function windowName(secs) {
    if (secs === null || secs === undefined) return "no window";
    for (const [u, name] of [[86400, "d"], [3600, "h"], [60, "min"]]) {
      if (secs >= u && secs % u === 0) return `${secs / u} ${name}`;
    }
    return `${secs} s`;
  }

  function clockTime(ms) {
    return new Date(ms).toLocaleTimeString("en-GB", { hour12: false });
  }

  function serverNowMs() {
    return Date.now() - skewMs;
  }

  // A live countdown to a gateway time (Unix ms). `onDone` runs once when it reaches 0.
  function countdown(deadlineMs, onDone) {
    const span = el("span", { class: "countdown", "data-deadline-ms": String(deadlineMs) });
    span._onDone = onDone || null;
    paint(span);
    return span;
  }

  function paint(span) {
    const left = (Number(span.dataset.deadlineMs) - serverNowMs()) / 1000;
    span.textContent = duration(left);
    span.dataset.secondsLeft = String(Math.max(0, Math.ceil(left)));
    if (left <= 0 && span._onDone) {
      const f = span._onDone;
      span._onDone = null;
      f();
    }
  }

  setInterval(() => document.querySelectorAll(".countdown").forEach(paint), 1000);

  // A meter: a bar filled to used/limit, amber from 80 %, red when full.
  function meter(used, limit) {
    const box = el("div", { class: "meter" });
    const fill = el("div", { class: "fill" });
    setMeter(fill, used, limit);
    box.append(fill);
    return box;
  }

  function setMeter(fill, used, limit) {
    const known = limit !== null && limit !== undefined && limit > 0 && used !== null && used !== undefined;
    const share = known ? Math.min(1, used / limit) : 0;
    fill.style.width = `${(share * 100).toFixed(1)}%`;
    fill.classList.toggle("warn", known && share >= 0.8 && share < 1);
    fill.classList.toggle("full", known && share >= 1);
    fill.parentElement && fill.parentElement.classList.toggle("unbounded", !known);
  }

  // GET/POST a gateway JSON route with a bearer credential. Resolves to the JSON body;
  // rejects with an Error whose message is what to show (the gateway's own message when
  // it sent one).
  async function call(method, path, bearer) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    let res;
    try {
      res = await fetch(path, {
        method,
        headers: { "Authorization": `Bearer ${bearer}`, "Accept": "application/json" },
        cache: "no-store",
        credentials: "omit",
        signal: ctl.signal,
      });
    } catch (e) {
      throw new Error(e.name === "AbortError"
        ? `${method} ${path}: no answer within ${FETCH_TIMEOUT_MS / 1000} s`
        : `${method} ${path}: the gateway could not be reached (${e.message})`);
    } finally {
      clearTimeout(timer);
    }
    const date = Date.parse(res.headers.get("date") || "");
    if (!Number.isNaN(date)) {
      const skew = Date.now() - date;
      // The Date header has whole seconds: only a larger gap is a real skew.
      skewMs = Math.abs(skew) > 2000 ? skew : 0;
    }
    let body = null;
    try { body = await res.json(); } catch (_) { body = null; }
    if (!res.ok) {
      const msg = body && (body.message || (body.error && body.error.message));
      const code = body && (body.code || (body.error && body.error.code));
      const err = new Error(`${res.status}${code ? ` · ${code}` : ""}: ${msg || res.statusText || "refused"}`);
      err.status = res.status;
      throw err;
    }
    return body;
  }

  function status(text, kind) {
    const s = document.getElementById("status");
    s.textContent = text;
    s.className = `status ${kind || ""}`;
    s.dataset.kind = kind || "info";
  }

  let codes = null;
  // The gateway's code table (GET /pages/codes.json), fetched once.
  async function codeTable() {
    if (codes) return codes;
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    try {
      const res = await fetch("/pages/codes.json", { cache: "no-store", signal: ctl.signal });
      if (!res.ok) throw new Error(`codes: ${res.status}`);
      codes = await res.json();
    } finally {
      clearTimeout(timer);
    }
    return codes;
  }

  return { el, num, duration, windowName, clockTime, countdown, meter, setMeter, call, status, codeTable, serverNowMs };
})();
