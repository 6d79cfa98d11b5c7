// The usage page: GET /usage with the key the holder pasted, rendered, and the key's
// recent requests from GET /usage/requests (20 a page, newest first, "More" for older).
"use strict";

(() => {
  const { el, num, windowName, countdown, meter, setMeter, call, status, codeTable } = Tg;
  // The key lives in this closure only: not in storage, not in a URL.
  let key = null;
  let loading = false;
  let refreshSoon = null;

  const DIMENSIONS = {
    requests: "Requests",
    tokens: "Tokens",
    images: "Images",
    videos: "Videos",
    amount: "Amount (spend)",
    rolling_requests: "Requests, rolling 60 s",
  };

  // Recent requests: the cursor of the next (older) page, how many pages are shown,
  // and a generation that drops an answer arriving after the list was reloaded.
  const REQUESTS_PAGE = 20;
  let requestsCursor = null;
  let requestsPages = 0;
  let requestsGen = 0;
  let requestsBusy = false;

  const OUTCOMES = {
    settled: "settled",
    pending: "pending",
    refunded: "refunded",
    written_off: "written off",
    reconciled: "reconciled",
  };

  function field(name, value) {
    document.querySelectorAll(`[data-field="${name}"]`).forEach((e) => { e.textContent = value; });
  }

  // A reset reached: the window rolled over, show the new state (once per burst).
  function scheduleRefresh() {
    if (refreshSoon) return;
    refreshSoon = setTimeout(() => { refreshSoon = null; load(); }, 1000);
  }

  function resetCell(resetsAtSecs, what) {
    if (resetsAtSecs === null || resetsAtSecs === undefined) {
      return el("td", { "data-field": "resets", class: "muted", text: what });
    }
    return el("td", { "data-field": "resets" }, countdown(resetsAtSecs * 1000, scheduleRefresh));
  }

  function policySection(p) {
    const scope = p.scope === "subscription" ? "Subscription" : "Key policy";
    const facts = [];
    if (p.scope === "subscription") {
      facts.push(p.active ? "active" : "not active");
      facts.push(p.pay_as_you_go ? "pay-as-you-go on: over its quota, requests are billed to the balance" : "pay-as-you-go off: over its quota, requests are refused (42906)");
      if (p.expires_at) facts.push(`expires ${new Date(p.expires_at * 1000).toLocaleString("en-GB")}`);
    }
    facts.push(p.concurrency > 0 ? `${p.concurrency} concurrent requests` : "no concurrency limit");
    const rows = p.limits.map((l) => {
      const unbounded = l.limit === 0;
      return el("tr", { class: "tier", "data-dimension": l.dimension, "data-window": l.window_secs === null ? "none" : String(l.window_secs) },
        el("td", { "data-field": "dimension", text: DIMENSIONS[l.dimension] || l.dimension }),
        el("td", { "data-field": "window", text: windowName(l.window_secs) }),
        el("td", { "data-field": "used", class: "num", text: num(l.used) }),
        el("td", { "data-field": "limit", class: "num", text: num(l.limit) }),
        el("td", { "data-field": "remaining", class: "num", text: num(l.remaining) }),
        el("td", { class: "meter-col" }, meter(l.used, unbounded ? null : l.limit)),
        resetCell(l.resets_at, l.window_secs === null ? "never (a cap)" : "at the next use + window"));
    });
    const table = el("table", { class: "tiers" },
      el("thead", {}, el("tr", {},
        el("th", { text: "dimension" }), el("th", { text: "window" }), el("th", { text: "used" }),
        el("th", { text: "limit" }), el("th", { text: "remaining" }), el("th", { class: "meter-col", text: "use" }),
        el("th", { text: "resets in" }))),
      el("tbody", {}, ...rows));
    return el("section", { class: "policy", "data-scope": p.scope },
      el("h2", { text: scope }),
      el("p", { class: "muted", text: facts.join(" · ") }),
      rows.length ? table : el("p", { class: "muted empty", text: "No windowed limits in this policy." }));
  }

  function render(u) {
    field("key", u.key);
    field("tenant", u.tenant || "none");
    field("in-flight", u.in_flight === null ? "unknown" : num(u.in_flight));
    field("concurrency-limit", u.concurrency_limit > 0 ? num(u.concurrency_limit) : "unlimited");
    setMeter(document.querySelector('[data-meter="slots"]'), u.in_flight, u.concurrency_limit > 0 ? u.concurrency_limit : null);

    const m = u.money;
    field("balance", m && m.balance !== null && m.balance !== undefined ? num(m.balance) : (m ? "no tenant balance" : "unknown"));
    field("tenant-pending", m ? num(m.tenant_pending_reconciliation) : "—");
    field("key-spent", m ? num(m.key_spent) : "unknown");
    field("spend-cap", m && m.spend_cap !== null && m.spend_cap !== undefined ? num(m.spend_cap) : "none");
    field("key-pending", m ? num(m.key_pending_reconciliation) : "—");
    setMeter(document.querySelector('[data-meter="spend"]'),
      m ? (m.key_spent || 0) + (m.key_pending_reconciliation || 0) : null, m ? m.spend_cap : null);
    const balance = document.querySelector('[data-field="balance"]');
    balance.classList.toggle("bad", !!(m && m.balance !== null && m.balance <= 0));

    const policies = document.getElementById("policies");
    policies.replaceChildren(...(u.policies.length
      ? u.policies.map(policySection)
      : [el("section", { class: "policy" }, el("h2", { text: "Limits" }),
          el("p", { class: "muted empty", text: "No policy limits this key (billing still applies)." }))]));

    const budgets = (m && m.budgets) || [];
    document.querySelector("#budgets tbody").replaceChildren(...budgets.map((b) =>
      el("tr", { "data-budget": b.id },
        el("td", { "data-field": "id", text: b.id }),
        el("td", { "data-field": "spent", class: "num", text: num(b.spent) }),
        el("td", { "data-field": "reserved", class: "num", text: num(b.reserved) }),
        el("td", { "data-field": "limit", class: "num", text: num(b.limit) }),
        el("td", { class: "meter-col" }, meter(b.spent + b.reserved, b.limit)),
        resetCell(b.resets_at, "at the next use + period"))));
    document.getElementById("budgets").hidden = budgets.length === 0;
    document.getElementById("no-budgets").hidden = budgets.length !== 0;
    document.getElementById("view").hidden = false;
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
      el("td", { "data-field": "model", text: r.model || "—" }),
      el("td", { "data-field": "input", class: "num", text: tokens(u && u.input_tokens) }),
      el("td", { "data-field": "cached", class: "num", text: tokens(u && u.cached_input_tokens) }),
      el("td", { "data-field": "output", class: "num", text: tokens(u && u.output_tokens) }),
      el("td", { "data-field": "cost", class: "num", text: num(r.amount) }),
      el("td", { "data-field": "outcome" },
        el("span", { class: `badge outcome ${r.outcome}`, text: OUTCOMES[r.outcome] || r.outcome })),
      el("td", { "data-field": "request-id", class: "code", text: r.request_id || "—" }));
  }

  // The section's state (rows, empty, no-ledger, error, loading) and its message.
  function showRequests(state, message) {
    const rows = document.querySelectorAll("#requests tbody tr").length;
    document.getElementById("requests-section").dataset.state = state;
    document.getElementById("requests").hidden = rows === 0;
    const note = document.getElementById("no-requests");
    note.textContent = message || "";
    note.hidden = !message;
    note.classList.toggle("error", state === "error");
  }

  // The first page (`fresh`) or the next one after the rows shown.
  async function loadRequests(fresh) {
    if (!key || (!fresh && (requestsBusy || !requestsCursor))) return;
    const gen = fresh ? ++requestsGen : requestsGen;
    const more = document.getElementById("requests-more");
    const body = document.querySelector("#requests tbody");
    requestsBusy = true;
    more.disabled = true;
    const cursor = fresh ? "" : `&cursor=${encodeURIComponent(requestsCursor)}`;
    try {
      const page = await call("GET", `/usage/requests?limit=${REQUESTS_PAGE}${cursor}`, key);
      if (gen !== requestsGen) return;
      const rows = page.records.map(requestRow);
      if (fresh) body.replaceChildren(...rows);
      else body.append(...rows);
      requestsCursor = page.next_cursor || null;
      requestsPages = fresh ? 1 : requestsPages + 1;
      showRequests(body.children.length ? "rows" : "empty",
        body.children.length ? "" : "No requests recorded for this key yet.");
    } catch (e) {
      if (gen !== requestsGen) return;
      if (fresh || e.status === 404) {
        body.replaceChildren();
        requestsCursor = null;
        requestsPages = 0;
      }
      if (e.status === 404) {
        showRequests("no-ledger", "This gateway keeps no ledger of requests: there are none to list.");
      } else {
        showRequests("error", `Recent requests could not be loaded: ${e.message}`);
      }
    } finally {
      if (gen === requestsGen) {
        requestsBusy = false;
        more.hidden = !requestsCursor;
        more.disabled = false;
      }
    }
  }

  // Forgets the list (another key, or none).
  function clearRequests() {
    requestsGen += 1;
    requestsBusy = false;
    requestsCursor = null;
    requestsPages = 0;
    document.querySelector("#requests tbody").replaceChildren();
    document.getElementById("requests-more").hidden = true;
    showRequests("loading", "");
  }

  // `withRequests`: the list is reloaded from its newest page too (a person asked);
  // a refresh on a timer reloads it only while it shows no more than its first page.
  async function load(withRequests) {
    if (!key || loading) return;
    loading = true;
    // Another key pasted while this one loads: its answer is dropped, the new key's
    // load follows.
    const asked = key;
    status("Loading…", "info");
    try {
      const u = await call("GET", "/usage", asked);
      if (asked !== key) return;
      render(u);
      if (withRequests || requestsPages <= 1) loadRequests(true);
      status(`Usage of key “${u.key}” as of ${new Date().toLocaleTimeString("en-GB", { hour12: false })}.`, "ok");
      document.getElementById("refresh").disabled = false;
    } catch (e) {
      if (asked !== key) return;
      document.getElementById("view").hidden = true;
      clearRequests();
      status(e.status === 401 ? "The gateway does not know this key (401 · 40101)." : e.message, "error");
    } finally {
      loading = false;
      if (asked !== key) load(true);
    }
  }

  async function showCodes() {
    try {
      const codes = await codeTable();
      document.querySelector("#codes tbody").replaceChildren(...codes.map((c) =>
        el("tr", { "data-code": String(c.code), class: c.status === 429 ? "hot" : null },
          el("td", { "data-field": "code", class: "code", text: String(c.code) }),
          el("td", { "data-field": "status", text: String(c.status) }),
          el("td", { "data-field": "message", text: c.message }),
          el("td", { "data-field": "meaning", text: c.meaning }))));
    } catch (e) {
      document.querySelector("#codes tbody").replaceChildren(
        el("tr", {}, el("td", { colspan: "4", class: "error", text: `The code table could not be loaded: ${e.message}` })));
    }
  }

  document.getElementById("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = document.getElementById("key");
    const next = input.value.trim() || null;
    if (next !== key) clearRequests();
    key = next;
    load(true);
  });
  document.getElementById("refresh").addEventListener("click", () => load(true));
  document.getElementById("requests-more").addEventListener("click", () => loadRequests(false));
  showCodes();
})();
