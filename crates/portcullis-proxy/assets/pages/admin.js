// The operator page: channels, rejections by code and, with a records database, a
// tenant's recent requests (GET /admin/tenants, GET /admin/usage), behind the admin token.
"use strict";

(() => {
  const { el, num, clockTime, countdown, meter, call, status, codeTable } = Tg;
  // The token lives in this closure only: not in storage, not in a URL.
  let token = null;
  let loading = false;
  let timer = null;
  const REFRESH_MS = 5000;

  // A tenant's recent requests: the tenant shown, the cursor of its next (older) page,
  // how many pages are shown, and a generation that drops an answer arriving after the
  // list was reloaded.
  const TENANT_PAGE = 20;
  let shownTenant = null;
  let tenantCursor = null;
  let tenantPages = 0;
  let tenantGen = 0;
  let tenantBusy = false;

  const OUTCOMES = {
    settled: "settled",
    pending: "pending",
    refunded: "refunded",
    written_off: "written off",
    reconciled: "reconciled",
  };

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

  // "2025-01-02T03:04:05Z" → "2025-01-02 03:04:05" (the column says UTC).
  function when(at) {
    return String(at).replace("T", " ").replace(/Z$/, "");
  }

  function requestRow(r) {
    const u = r.usage;
    const tokens = (n) => (u ? num(n) : "—");
    return el("tr", { class: "request", "data-at-ms": String(r.at_ms), "data-outcome": r.outcome },
      el("td", { "data-field": "time", class: "when", title: r.at, text: when(r.at) }),
      el("td", { "data-field": "key", class: "code", text: r.key }),
      el("td", { "data-field": "model", text: r.model || "—" }),
      el("td", { "data-field": "channel", text: r.channel || "—" }),
      el("td", { "data-field": "input", class: "num", text: tokens(u && u.input_tokens) }),
      el("td", { "data-field": "cached", class: "num", text: tokens(u && u.cached_input_tokens) }),
      el("td", { "data-field": "output", class: "num", text: tokens(u && u.output_tokens) }),
      el("td", { "data-field": "cost", class: "num", text: num(r.amount) }),
      el("td", { "data-field": "outcome" },
        el("span", { class: `badge outcome ${r.outcome}`, text: OUTCOMES[r.outcome] || r.outcome })),
      el("td", { "data-field": "request-id", class: "code", text: r.request_id || "—" }));
  }

  // The section's state (rows, empty, error, loading) and its message.
  function showTenantRequests(state, message) {
    const rows = document.querySelectorAll("#tenant-requests tbody tr").length;
    document.getElementById("tenant-requests-section").dataset.state = state;
    document.getElementById("tenant-requests").hidden = rows === 0;
    const note = document.getElementById("no-tenant-requests");
    note.textContent = message || "";
    note.hidden = !message;
    note.classList.toggle("error", state === "error");
  }

  function clearTenantRequests() {
    tenantGen += 1;
    tenantBusy = false;
    tenantCursor = null;
    tenantPages = 0;
    document.querySelector("#tenant-requests tbody").replaceChildren();
    document.getElementById("tenant-more").hidden = true;
  }

  // The chosen tenant's first page (`fresh`) or the next one after the rows shown.
  async function loadTenantRequests(fresh) {
    const tenant = document.getElementById("tenant-select").value;
    if (!token || !tenant || (!fresh && (tenantBusy || !tenantCursor || tenant !== shownTenant))) return;
    const gen = fresh ? ++tenantGen : tenantGen;
    const more = document.getElementById("tenant-more");
    const body = document.querySelector("#tenant-requests tbody");
    tenantBusy = true;
    more.disabled = true;
    const cursor = fresh ? "" : `&cursor=${encodeURIComponent(tenantCursor)}`;
    try {
      const page = await call("GET",
        `/admin/usage?tenant=${encodeURIComponent(tenant)}&order=newest&limit=${TENANT_PAGE}${cursor}`, token);
      if (gen !== tenantGen) return;
      const rows = page.records.map(requestRow);
      if (fresh) body.replaceChildren(...rows);
      else body.append(...rows);
      shownTenant = tenant;
      tenantCursor = page.next_cursor || null;
      tenantPages = fresh ? 1 : tenantPages + 1;
      document.getElementById("tenant-requests-section").dataset.tenant = tenant;
      showTenantRequests(body.children.length ? "rows" : "empty",
        body.children.length ? "" : `No requests recorded for tenant “${tenant}” yet.`);
    } catch (e) {
      if (gen !== tenantGen) return;
      if (fresh) {
        body.replaceChildren();
        tenantCursor = null;
        tenantPages = 0;
      }
      showTenantRequests("error", `The requests of tenant “${tenant}” could not be loaded: ${e.message}`);
    } finally {
      if (gen === tenantGen) {
        tenantBusy = false;
        more.hidden = !tenantCursor;
        more.disabled = false;
      }
    }
  }

  // The tenant selector from GET /admin/tenants (the section hidden when the gateway has
  // no tenant routes: no records database), then the chosen tenant's requests — on a
  // refresh on a timer only while its list shows no more than its first page.
  async function refreshTenants(force) {
    const section = document.getElementById("tenant-requests-section");
    let list;
    try {
      list = await call("GET", "/admin/tenants", token);
    } catch (e) {
      if (e.status === 404) {
        section.hidden = true;
        clearTenantRequests();
        section.dataset.state = "off";
      } else {
        section.hidden = false;
        showTenantRequests("error", `The tenants could not be loaded: ${e.message}`);
      }
      return;
    }
    section.hidden = false;
    const names = [...new Set(list.tenants.map((t) => t.name))].sort();
    const select = document.getElementById("tenant-select");
    const chosen = select.value;
    if (names.join("\n") !== [...select.options].map((o) => o.value).join("\n")) {
      select.replaceChildren(...names.map((n) => el("option", { value: n, text: n })));
    }
    if (names.includes(chosen)) select.value = chosen;
    if (!select.value) {
      clearTenantRequests();
      shownTenant = null;
      showTenantRequests("empty", "No tenants yet.");
      return;
    }
    if (force || select.value !== shownTenant || tenantPages <= 1) loadTenantRequests(true);
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
      refreshTenants(force);
      document.getElementById("view").hidden = false;
      document.getElementById("refresh").disabled = false;
      document.body.dataset.loadedAt = String(Date.now());
      status(message || `Connected · ${ch.channels.length} channels · updated ${new Date().toLocaleTimeString("en-GB", { hour12: false })}`, "ok");
    } catch (e) {
      if (e.status === 401 || e.status === 404) {
        document.getElementById("view").hidden = true;
        clearTenantRequests();
        shownTenant = null;
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
  document.getElementById("tenant-select").addEventListener("change", () => {
    clearTenantRequests();
    showTenantRequests("loading", "");
    loadTenantRequests(true);
  });
  document.getElementById("tenant-more").addEventListener("click", () => loadTenantRequests(false));
  document.getElementById("auto").addEventListener("change", () => { if (token) schedule(); });
})();
