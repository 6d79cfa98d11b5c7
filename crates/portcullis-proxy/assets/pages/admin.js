// The operator page: channels and rejections by code, behind the admin token.
"use strict";

(() => {
  const { el, num, clockTime, countdown, meter, call, status, codeTable } = Tg;
  // The token lives in this closure only: not in storage, not in a URL.
  let token = null;
  let loading = false;
  let timer = null;
  const REFRESH_MS = 5000;

  function healthCell(h) {
    const td = el("td", { "data-field": "health" });
    if (typeof h === "string") {
      const label = { healthy: "healthy", degraded: "degraded", half_open: "half open" }[h] || h;
      td.dataset.state = h;
      td.append(el("span", { class: `badge ${h}`, text: label }));
    } else if (h && h.open_until_ms) {
      td.dataset.state = "open";
      td.append(el("span", { class: "badge open", text: "open" }), " until ",
        clockTime(h.open_until_ms), " (", countdown(h.open_until_ms, () => refresh()), ")");
    } else {
      td.append("unknown");
    }
    return td;
  }

  function cooldownCell(c) {
    const td = el("td", { "data-field": "cooldown" });
    if (c.disabled) {
      td.dataset.state = "disabled";
      td.append(el("span", { class: "badge open", text: "disabled" }), " credential refused by the provider");
    } else if (c.cooling_until_ms) {
      td.dataset.state = "cooling";
      td.append(el("span", { class: "badge degraded", text: "cooling" }), " until ",
        clockTime(c.cooling_until_ms), " (", countdown(c.cooling_until_ms, () => refresh()), ")");
    } else {
      td.dataset.state = "none";
      td.append(el("span", { class: "muted", text: "—" }));
    }
    return td;
  }

  function channelRow(c) {
    const needsHand = c.disabled || c.cooling_until_ms || c.health !== "healthy";
    const button = needsHand
      ? el("button", { type: "button", class: "enable", "data-channel": c.name, text: "Enable" })
      : null;
    if (button) button.addEventListener("click", () => enable(c.name, button));
    return el("tr", { "data-channel": c.name, class: c.disabled ? "off" : null },
      el("td", { "data-field": "name", class: "code", text: c.name }),
      el("td", { "data-field": "models" }, el("span", { class: "muted", text: `${c.vendor} · ` }), c.models.join(", ")),
      el("td", { "data-field": "in-flight", class: "num", text: `${c.in_flight === null ? "?" : num(c.in_flight)} / ${c.capacity > 0 ? num(c.capacity) : "∞"}` }),
      el("td", { class: "meter-col" }, meter(c.in_flight, c.capacity > 0 ? c.capacity : null)),
      healthCell(c.health),
      el("td", { "data-field": "recent", class: "num", text: `${num(c.recent_ok)} / ${num(c.recent_failed)}` }),
      cooldownCell(c),
      el("td", {}, button));
  }

  async function enable(name, button) {
    button.disabled = true;
    try {
      await call("POST", `/admin/channels/${encodeURIComponent(name)}/enable`, token);
      await refresh(true, `Channel “${name}” enabled: back in rotation.`);
    } catch (e) {
      button.disabled = false;
      status(`Enabling “${name}” failed: ${e.message}`, "error");
    }
  }

  function renderRejections(r, codes) {
    const byCode = new Map(codes.map((c) => [String(c.code), c]));
    const minutes = r.buckets;
    document.querySelector('[data-field="minutes"]').textContent = String(r.minutes);
    const seen = Object.keys(r.totals).sort();
    const head = document.querySelector("#rejections thead tr");
    head.replaceChildren(el("th", { text: "code" }), el("th", { text: "meaning" }),
      ...minutes.map((m) => el("th", { class: "minute", "data-minute": String(m.start_ms), text: clockTime(m.start_ms).slice(0, 5) })),
      el("th", { text: "total" }));
    document.querySelector("#rejections tbody").replaceChildren(...seen.map((code) => {
      const info = byCode.get(code);
      return el("tr", { "data-code": code },
        el("td", { class: "code", text: code }),
        el("td", { class: "meaning", title: info ? info.meaning : "", text: info ? info.message : "" }),
        ...minutes.map((m) => {
          const n = m.counts[code] || 0;
          return el("td", { class: `num minute${n ? " hit" : ""}`, "data-minute": String(m.start_ms), text: n ? num(n) : "·" });
        }),
        el("td", { "data-field": "total", class: "num total", text: num(r.totals[code]) }));
    }));
    document.getElementById("rejections").hidden = seen.length === 0;
    document.getElementById("no-rejections").hidden = seen.length !== 0;

    const totals = minutes.map((m) => Object.values(m.counts).reduce((a, b) => a + b, 0));
    const peak = Math.max(1, ...totals);
    document.getElementById("rejection-chart").replaceChildren(...minutes.map((m, i) => {
      const bar = el("div", { class: `stack${totals[i] ? " hit" : ""}` });
      bar.style.height = `${(totals[i] / peak * 100).toFixed(1)}%`;
      return el("div", { class: "col", title: `${clockTime(m.start_ms).slice(0, 5)}: ${totals[i]} refused` },
        el("div", { class: "count", text: totals[i] ? String(totals[i]) : "" }),
        el("div", { class: "well" }, bar),
        el("div", { class: "label", text: i % 3 === 2 || i === minutes.length - 1 ? clockTime(m.start_ms).slice(0, 5) : "" }));
    }));
  }

  async function refresh(force, message) {
    if (!token || (loading && !force)) return;
    loading = true;
    try {
      const [ch, rej, codes] = await Promise.all([
        call("GET", "/admin/channels", token),
        call("GET", "/admin/rejections", token),
        codeTable(),
      ]);
      document.querySelector("#channels tbody").replaceChildren(...ch.channels.map(channelRow));
      renderRejections(rej, codes);
      document.getElementById("view").hidden = false;
      document.getElementById("refresh").disabled = false;
      document.body.dataset.loadedAt = String(Date.now());
      status(message || `Connected · ${ch.channels.length} channels · updated ${new Date().toLocaleTimeString("en-GB", { hour12: false })}`, "ok");
    } catch (e) {
      if (e.status === 401 || e.status === 404) {
        document.getElementById("view").hidden = true;
        stop();
      }
      status(e.status === 401 ? "The admin token was refused (401)."
        : e.status === 404 ? "The admin routes are off: this gateway has no admin token configured."
        : e.message, "error");
    } finally {
      loading = false;
    }
  }

  function stop() {
    if (timer) clearInterval(timer);
    timer = null;
  }

  function schedule() {
    stop();
    if (document.getElementById("auto").checked) timer = setInterval(() => refresh(), REFRESH_MS);
  }

  document.getElementById("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = document.getElementById("token").value.trim() || null;
    refresh(true).then(schedule);
  });
  document.getElementById("refresh").addEventListener("click", () => refresh(true));
  document.getElementById("auto").addEventListener("change", () => { if (token) schedule(); });
})();
