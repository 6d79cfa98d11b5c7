// The keys page: the records database's keys and tenants through the admin API
// (`/admin/keys…`, `/admin/tenants…`), behind the admin token or a tenant's token.
"use strict";

(() => {
  const { el, num, status } = Tg;
  // Every call is bounded, as the shared helpers' are.
  const FETCH_TIMEOUT_MS = 10000;
  // Keys per `GET /admin/keys` page ("More keys" asks for the next).
  const PAGE = 50;

  // The token lives in this closure only: not in storage, not in a URL.
  let token = null;
  // "operator" (the admin token) or "tenant" (a tenant's management token).
  let mode = null;
  // Bumped on every connect: an answer to an older token's call is dropped.
  let generation = 0;
  // The keys shown, by id (rendered in id order, the order the server pages in).
  let keys = new Map();
  let staticKeys = [];
  let cursor = null;
  let tenants = [];
  // The key the manage panel is open on.
  let managed = null;

  const $ = (id) => document.getElementById(id);

  // A JSON admin call with the token. Resolves to the body; rejects with an Error
  // carrying the status and the field the gateway names (a 400 of a key's rule).
  async function api(method, path, body) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    const headers = { "Authorization": `Bearer ${token}`, "Accept": "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res;
    try {
      res = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
        referrerPolicy: "no-referrer",
        signal: ctl.signal,
      });
    } catch (e) {
      throw new Error(e.name === "AbortError"
        ? `${method} ${path.split("?")[0]}: no answer within ${FETCH_TIMEOUT_MS / 1000} s`
        : `${method} ${path.split("?")[0]}: the gateway could not be reached (${e.message})`);
    } finally {
      clearTimeout(timer);
    }
    let data = null;
    try { data = await res.json(); } catch (_) { data = null; }
    if (!res.ok) {
      const e = data && data.error;
      const message = (e && e.message) || (data && data.message) || res.statusText || "refused";
      const err = new Error(`${res.status}: ${message}`);
      err.status = res.status;
      err.field = (e && e.field) || null;
      throw err;
    }
    return data;
  }

  // ---------------------------------------------------------------- forms

  function input(form, field) {
    return form.querySelector(`[data-key-field="${field}"]`);
  }

  function value(form, field) {
    const i = input(form, field);
    return i ? i.value.trim() : "";
  }

  // A form's error, shown next to it; the field the gateway named is marked.
  function showError(box, form, err) {
    box.textContent = err.message;
    box.hidden = false;
    box.dataset.errorField = err.field || "";
    if (form && err.field) {
      const i = input(form, err.field);
      if (i) {
        i.classList.add("invalid");
        i.setAttribute("aria-invalid", "true");
        i.focus();
      }
    }
  }

  function clearError(box, form) {
    box.textContent = "";
    box.hidden = true;
    delete box.dataset.errorField;
    if (form) {
      form.querySelectorAll(".invalid").forEach((i) => {
        i.classList.remove("invalid");
        i.removeAttribute("aria-invalid");
      });
    }
  }

  // A field the page itself refuses, before any call: named like the gateway's.
  function localError(field, reason) {
    const e = new Error(`${field}: ${reason}`);
    e.field = field;
    return e;
  }

  // A whole number or nothing (null).
  function integer(form, field) {
    const v = value(form, field);
    if (v === "") return null;
    if (!/^-?\d+$/.test(v)) throw localError(field, `${JSON.stringify(v)} is not a whole number`);
    const n = Number(v);
    if (!Number.isSafeInteger(n)) throw localError(field, "out of range");
    return n;
  }

  function models(form) {
    return value(form, "models").split(",").map((m) => m.trim()).filter((m) => m);
  }

  function subscription(form) {
    const policy = value(form, "subscription");
    if (policy === "") return null;
    return {
      policy,
      expires_at: value(form, "subscription_expires_at") || null,
      pay_as_you_go: input(form, "pay_as_you_go").checked,
    };
  }

  // What a key form says, as the API takes it; an empty field is null (cleared).
  function keyFields(form) {
    return {
      label: value(form, "label"),
      policy: value(form, "policy") || null,
      rpm: integer(form, "rpm"),
      concurrency: integer(form, "concurrency"),
      spend_cap: integer(form, "spend_cap"),
      models: models(form),
      subscription: subscription(form),
      expires_at: value(form, "expires_at") || null,
      errors: value(form, "errors") || null,
    };
  }

  // ---------------------------------------------------------------- secrets

  // A secret shown once in `box`: a Copy button and the warning. Dismissed (Done, or
  // the form used again) it leaves the DOM.
  function showSecret(box, title, secret, note) {
    const copy = el("button", { type: "button", class: "copy small", text: "Copy" });
    const done = el("button", { type: "button", class: "secondary small done", text: "Done" });
    const code = el("code", { "data-field": "secret", text: secret });
    const copied = el("span", { class: "muted copied", "data-field": "copied" });
    copy.addEventListener("click", async () => {
      try {
        if (!navigator.clipboard) throw new Error("no clipboard on a page not served over HTTPS or from localhost");
        await navigator.clipboard.writeText(secret);
        copied.textContent = "Copied.";
        copy.dataset.copied = "true";
      } catch (e) {
        // Select it for a manual copy instead.
        const range = document.createRange();
        range.selectNodeContents(code);
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        copied.textContent = `The browser refused to copy (${e.message}): the secret is selected, copy it with Ctrl+C.`;
        copy.dataset.copied = "false";
      }
    });
    done.addEventListener("click", () => hideSecret(box));
    box.replaceChildren(
      el("p", { class: "secret-title", text: title }),
      el("div", { class: "secret-line" }, code, copy, done, copied),
      el("p", { class: "warn", text: "Copy it now: it is shown this once and never again. The gateway keeps only its hash." }),
      note ? el("p", { class: "muted note", text: note }) : null);
    box.hidden = false;
  }

  function hideSecret(box) {
    box.replaceChildren();
    box.hidden = true;
  }

  function hideAllSecrets() {
    ["create-secret", "rotate-secret", "token-secret"].forEach((id) => hideSecret($(id)));
  }

  // ---------------------------------------------------------------- keys

  function limitSpans(k) {
    const spans = [];
    const add = (name, text) => spans.push(el("span", { class: "limit", "data-limit": name, text }));
    if (k.policy) add("policy", `policy ${k.policy}`);
    if (k.rpm !== null && k.rpm !== undefined) add("rpm", `rpm ${num(k.rpm)}`);
    if (k.concurrency !== null && k.concurrency !== undefined) add("concurrency", `concurrency ${num(k.concurrency)}`);
    if (k.spend_cap !== null && k.spend_cap !== undefined) add("spend_cap", `spend cap ${num(k.spend_cap)}`);
    if (k.models && k.models.length) add("models", `models ${k.models.join(", ")}`);
    if (k.subscription) {
      const s = k.subscription;
      add("subscription", `subscription ${s.policy}${s.expires_at ? ` until ${s.expires_at}` : ""}${s.pay_as_you_go ? " (pay-as-you-go)" : ""}`);
    }
    if (k.errors) add("errors", `errors ${k.errors}`);
    return spans.length ? spans : [el("span", { class: "muted", "data-limit": "none", text: "none of its own" })];
  }

  function expiresCell(k) {
    const td = el("td", { "data-field": "expires" });
    if (!k.expires_at) {
      td.append(el("span", { class: "muted", text: "never" }));
    } else {
      td.append(k.expires_at);
      const at = Date.parse(k.expires_at);
      if (!Number.isNaN(at) && at <= Tg.serverNowMs()) {
        td.classList.add("bad");
        td.append(" (expired)");
      }
    }
    return td;
  }

  function keyRow(k) {
    const revoked = k.state !== "active";
    const manage = revoked ? null : el("button", { type: "button", class: "manage small", "data-key-id": k.id, text: "Manage" });
    if (manage) manage.addEventListener("click", () => openManage(k.id));
    return el("tr", { "data-key-id": k.id, "data-state": k.state, class: `${revoked ? "off" : ""}${managed === k.id ? " selected" : ""}`.trim() || null },
      el("td", { "data-field": "label", text: k.label }),
      el("td", { "data-field": "id", class: "code", text: k.id }),
      el("td", { "data-field": "tenant", text: k.tenant || "—" }),
      el("td", { "data-field": "state" }, el("span", { class: `badge ${revoked ? "open" : "healthy"}`, text: k.state })),
      el("td", { "data-field": "limits", class: "limits" }, ...limitSpans(k)),
      expiresCell(k),
      el("td", { class: "actions-cell" }, manage));
  }

  function renderKeys() {
    const rows = [...keys.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)).map(keyRow);
    document.querySelector("#keys tbody").replaceChildren(...rows);
    $("keys").hidden = rows.length === 0;
    $("no-keys").hidden = rows.length !== 0;
    $("more").hidden = !cursor;
    document.querySelector('[data-field="key-count"]').textContent =
      `${rows.length} ${rows.length === 1 ? "key" : "keys"} shown${cursor ? ", more on the server" : ""}`;
    document.querySelector("#static-keys tbody").replaceChildren(...staticKeys.map((s) =>
      el("tr", { "data-static-label": s.label },
        el("td", { "data-field": "label", text: s.label }),
        el("td", { "data-field": "tenant", text: s.tenant || "—" }),
        el("td", { "data-field": "source" }, el("span", { class: "badge", text: "file" })))));
    $("static-section").hidden = staticKeys.length === 0;
  }

  function keysPath(after) {
    const q = new URLSearchParams({ limit: String(PAGE) });
    const filter = mode === "operator" ? $("tenant-filter").value : "";
    if (filter) q.set("tenant", filter);
    if (after) q.set("cursor", after);
    return `/admin/keys?${q}`;
  }

  // The first page again (`fresh`), or the next one.
  async function loadKeys(fresh) {
    const gen = generation;
    const page = await api("GET", keysPath(fresh ? null : cursor));
    if (gen !== generation) return;
    if (fresh) {
      keys = new Map();
      staticKeys = page.static_keys || [];
    }
    for (const k of page.keys) keys.set(k.id, k);
    cursor = page.next_cursor || null;
    if (managed && !keys.has(managed)) closeManage();
    renderKeys();
  }

  // A record the server answered with: shown in place.
  function updated(k) {
    keys.set(k.id, k);
    renderKeys();
  }

  // ---------------------------------------------------------------- manage a key

  function fillEdit(k) {
    const f = $("edit-form");
    const set = (field, v) => { input(f, field).value = v === null || v === undefined ? "" : String(v); };
    set("label", k.label);
    set("policy", k.policy);
    set("rpm", k.rpm);
    set("concurrency", k.concurrency);
    set("spend_cap", k.spend_cap);
    set("models", (k.models || []).join(", "));
    set("expires_at", k.expires_at);
    set("errors", k.errors);
    set("subscription", k.subscription ? k.subscription.policy : "");
    set("subscription_expires_at", k.subscription ? k.subscription.expires_at : "");
    input(f, "pay_as_you_go").checked = !!(k.subscription && k.subscription.pay_as_you_go);
  }

  function manageTitle(k) {
    document.querySelector('[data-field="manage-label"]').textContent = `“${k.label}”`;
    document.querySelector('[data-field="manage-id"]').textContent = k.id;
    document.querySelector('[data-field="revoke-label"]').textContent = `“${k.label}” (${k.id})`;
  }

  function openManage(id) {
    const k = keys.get(id);
    if (!k) return;
    if (managed !== id) {
      hideSecret($("rotate-secret"));
      $("grace").value = "0";
    }
    managed = id;
    fillEdit(k);
    clearError($("edit-error"), $("edit-form"));
    clearError($("rotate-error"), null);
    clearError($("revoke-error"), null);
    $("revoke-confirm").hidden = true;
    $("revoke").hidden = false;
    manageTitle(k);
    $("manage").dataset.keyId = id;
    $("manage").hidden = false;
    renderKeys();
    $("manage").scrollIntoView({ block: "nearest" });
  }

  function closeManage() {
    managed = null;
    hideSecret($("rotate-secret"));
    $("manage").hidden = true;
    delete $("manage").dataset.keyId;
    renderKeys();
  }

  async function saveLimits(ev) {
    ev.preventDefault();
    const form = $("edit-form");
    const box = $("edit-error");
    clearError(box, form);
    const id = managed;
    const stored = keys.get(id);
    if (!stored) return;
    let patch;
    try {
      const now = keyFields(form);
      const before = {
        label: stored.label,
        policy: stored.policy ?? null,
        rpm: stored.rpm ?? null,
        concurrency: stored.concurrency ?? null,
        spend_cap: stored.spend_cap ?? null,
        models: stored.models || [],
        subscription: stored.subscription
          ? { policy: stored.subscription.policy, expires_at: stored.subscription.expires_at ?? null, pay_as_you_go: !!stored.subscription.pay_as_you_go }
          : null,
        expires_at: stored.expires_at ?? null,
        errors: stored.errors ?? null,
      };
      // Only what changed: a field given replaces, null clears.
      patch = {};
      for (const [k, v] of Object.entries(now)) {
        if (JSON.stringify(v) !== JSON.stringify(before[k])) patch[k] = v;
      }
    } catch (e) {
      showError(box, form, e);
      return;
    }
    if (Object.keys(patch).length === 0) {
      status(`Nothing to save: “${stored.label}” already has these limits.`, "info");
      return;
    }
    const button = $("save");
    button.disabled = true;
    try {
      const k = await api("PATCH", `/admin/keys/${encodeURIComponent(id)}`, patch);
      updated(k);
      if (managed === id) {
        fillEdit(k);
        manageTitle(k);
      }
      status(`Key “${k.label}” changed (${Object.keys(patch).join(", ")}): the gateway follows at once.`, "ok");
    } catch (e) {
      showError(box, form, e);
    } finally {
      button.disabled = false;
    }
  }

  async function rotate(ev) {
    ev.preventDefault();
    const box = $("rotate-error");
    clearError(box, null);
    hideSecret($("rotate-secret"));
    const id = managed;
    const k = keys.get(id);
    if (!k) return;
    const grace = $("grace").value.trim() || "0";
    if (!/^\d+$/.test(grace)) {
      showError(box, null, localError("grace_seconds", `${JSON.stringify(grace)} is not a whole number of seconds`));
      return;
    }
    const button = $("rotate");
    button.disabled = true;
    try {
      const r = await api("POST", `/admin/keys/${encodeURIComponent(id)}/rotate`, { grace_seconds: Number(grace) });
      if (managed !== id) return;
      const left = r.old_key_valid_for_seconds;
      showSecret($("rotate-secret"), `New secret of “${k.label}”`, r.key,
        left > 0 ? `The old secret keeps working for ${Tg.duration(left)}, then is refused.` : "The old secret is refused from now on.");
      status(`Key “${k.label}” rotated.`, "ok");
    } catch (e) {
      showError(box, null, e);
    } finally {
      button.disabled = false;
    }
  }

  async function revoke() {
    const box = $("revoke-error");
    clearError(box, null);
    const id = managed;
    const yes = $("revoke-yes");
    yes.disabled = true;
    try {
      const k = await api("DELETE", `/admin/keys/${encodeURIComponent(id)}`);
      updated(k);
      if (managed === id) closeManage();
      status(`Key “${k.label}” revoked: requests with it are refused (401) from now on.`, "ok");
    } catch (e) {
      showError(box, null, e);
    } finally {
      yes.disabled = false;
      $("revoke-confirm").hidden = true;
      $("revoke").hidden = false;
    }
  }

  // ---------------------------------------------------------------- create a key

  async function createKey(ev) {
    ev.preventDefault();
    const form = $("create-form");
    const box = $("create-error");
    // The form used again: the last secret leaves the page.
    hideSecret($("create-secret"));
    clearError(box, form);
    let body;
    try {
      const f = keyFields(form);
      body = { label: f.label };
      // Only what is set: the rest is the gateway's default.
      for (const [k, v] of Object.entries(f)) {
        if (k !== "label" && v !== null && !(Array.isArray(v) && v.length === 0)) body[k] = v;
      }
      const tenant = mode === "operator" ? value(form, "tenant") : "";
      if (tenant) body.tenant = tenant;
    } catch (e) {
      showError(box, form, e);
      return;
    }
    const button = $("create");
    button.disabled = true;
    try {
      const created = await api("POST", "/admin/keys", body);
      const secret = created.key;
      delete created.key;
      updated(created);
      form.reset();
      showSecret($("create-secret"), `Secret of the new key “${created.label}” (${created.id})`, secret,
        "Give it to the key's holder; it goes in the Authorization header (Bearer) of model requests.");
      status(`Key “${created.label}” created${created.tenant ? ` for tenant “${created.tenant}”` : ""}.`, "ok");
    } catch (e) {
      showError(box, form, e);
    } finally {
      button.disabled = false;
    }
  }

  // ---------------------------------------------------------------- tenants

  function tenantOptions() {
    const names = tenants.map((t) => t.name);
    for (const [select, first] of [[input($("create-form"), "tenant"), "no tenant"], [$("tenant-filter"), "all tenants"]]) {
      const keep = select.value;
      select.replaceChildren(el("option", { value: "", text: first }), ...names.map((n) => el("option", { value: n, text: n })));
      select.value = names.includes(keep) ? keep : "";
    }
  }

  function tenantRow(t) {
    const amount = el("input", { type: "text", inputMode: "numeric", class: "short", placeholder: "amount", "aria-label": `top-up amount for ${t.name}` });
    const topUp = el("button", { type: "submit", class: "small", text: "Top up" });
    const form = el("form", { class: "inline-form top-up", "data-tenant": t.name, autocomplete: "off", noValidate: true }, amount, topUp);
    form.addEventListener("submit", (ev) => { ev.preventDefault(); topUpTenant(t.name, amount, topUp); });
    const make = el("button", { type: "button", class: "secondary small make-token", "data-tenant": t.name, text: "Make token" });
    make.addEventListener("click", () => makeToken(t.name, make));
    return el("tr", { "data-tenant": t.name },
      el("td", { "data-field": "name", text: t.name }),
      el("td", { "data-field": "source", class: "muted", text: t.static ? "configuration file" : "database" }),
      el("td", { "data-field": "balance", class: "num", text: num(t.balance) }),
      el("td", {}, form),
      el("td", {}, make));
  }

  function renderTenants() {
    document.querySelector("#tenants tbody").replaceChildren(...tenants.map(tenantRow));
    tenantOptions();
  }

  async function loadTenants() {
    const gen = generation;
    const t = await api("GET", "/admin/tenants");
    if (gen !== generation) return;
    tenants = t.tenants;
    renderTenants();
  }

  async function topUpTenant(name, amountInput, button) {
    const box = $("tenants-error");
    clearError(box, null);
    amountInput.classList.remove("invalid");
    const v = amountInput.value.trim();
    if (!/^\d+$/.test(v)) {
      amountInput.classList.add("invalid");
      showError(box, null, localError("amount", `top-up of “${name}”: ${JSON.stringify(v)} is not a positive whole number`));
      return;
    }
    button.disabled = true;
    try {
      const r = await api("POST", `/admin/tenants/${encodeURIComponent(name)}/top-up`, { amount: Number(v) });
      const t = tenants.find((x) => x.name === name);
      if (t) t.balance = r.balance;
      const cell = document.querySelector(`#tenants tr[data-tenant="${CSS.escape(name)}"] [data-field="balance"]`);
      if (cell) cell.textContent = num(r.balance);
      amountInput.value = "";
      status(`Tenant “${name}” topped up by ${num(r.amount)}: balance ${num(r.balance)}.`, "ok");
    } catch (e) {
      amountInput.classList.add("invalid");
      showError(box, null, new Error(`Top-up of “${name}”: ${e.message}`));
    } finally {
      button.disabled = false;
    }
  }

  async function makeToken(name, button) {
    const box = $("tenants-error");
    clearError(box, null);
    hideSecret($("token-secret"));
    button.disabled = true;
    try {
      const r = await api("POST", `/admin/tenants/${encodeURIComponent(name)}/tokens`);
      showSecret($("token-secret"), `Management token of tenant “${r.tenant}” (${r.id})`, r.token,
        `It manages “${r.tenant}”'s keys only: paste it in this page's Token field, or send it to /admin/keys.`);
      status(`Token made for tenant “${r.tenant}”.`, "ok");
    } catch (e) {
      showError(box, null, new Error(`Token for “${name}”: ${e.message}`));
    } finally {
      button.disabled = false;
    }
  }

  async function createTenant(ev) {
    ev.preventDefault();
    const form = $("tenant-form");
    const box = $("tenant-error");
    clearError(box, form);
    let body;
    try {
      body = { name: value(form, "name") };
      const balance = integer(form, "balance");
      const weight = integer(form, "weight");
      if (balance !== null) body.balance = balance;
      if (weight !== null) body.weight = weight;
    } catch (e) {
      showError(box, form, e);
      return;
    }
    const button = $("create-tenant-button");
    button.disabled = true;
    try {
      const t = await api("POST", "/admin/tenants", body);
      form.reset();
      await loadTenants();
      status(`Tenant “${t.name}” created with a balance of ${num(t.balance)}.`, "ok");
    } catch (e) {
      showError(box, form, e);
    } finally {
      button.disabled = false;
    }
  }

  // ---------------------------------------------------------------- connect

  function reset() {
    hideAllSecrets();
    managed = null;
    $("manage").hidden = true;
    keys = new Map();
    staticKeys = [];
    cursor = null;
    tenants = [];
    ["create-error", "edit-error", "rotate-error", "revoke-error", "tenants-error", "tenant-error"]
      .forEach((id) => clearError($(id), null));
    document.querySelector("#keys tbody").replaceChildren();
    document.querySelector("#tenants tbody").replaceChildren();
    $("tenant-filter").value = "";
  }

  async function connect() {
    generation += 1;
    const gen = generation;
    reset();
    mode = null;
    document.body.dataset.mode = "";
    $("view").hidden = true;
    $("refresh").disabled = true;
    status("Connecting…", "info");
    try {
      try {
        const t = await api("GET", "/admin/tenants");
        if (gen !== generation) return;
        mode = "operator";
        tenants = t.tenants;
      } catch (e) {
        if (e.status !== 403) throw e;
        // The tenant routes answer a tenant's token 403: its own keys only.
        mode = "tenant";
      }
      await loadKeys(true);
      if (gen !== generation) return;
      render();
      $("refresh").disabled = false;
      status(mode === "operator"
        ? `Connected with the admin token · ${keys.size} keys, ${tenants.length} tenants.`
        : "Connected with a tenant's management token: this tenant's keys only.", "ok");
    } catch (e) {
      if (gen !== generation) return;
      mode = null;
      $("view").hidden = true;
      // Without a records database there are no key routes: is the token the admin's?
      let admin = false;
      if (e.status === 401 || e.status === 404) {
        try { await api("GET", "/admin/channels"); admin = true; } catch (_) { admin = false; }
        if (gen !== generation) return;
      }
      status(admin ? "The admin token is right, but this gateway keeps no keys in a database: [database] is not configured."
        : e.status === 401 ? "The token was refused (401): it is neither the admin token nor a tenant's management token."
        : e.status === 404 ? "The key routes are off: this gateway has no admin token configured."
        : e.message, "error");
    }
  }

  function render() {
    const operator = mode === "operator";
    document.body.dataset.mode = mode;
    $("tenants-section").hidden = !operator;
    $("filter").hidden = !operator;
    $("create-tenant").hidden = !operator;
    // Named policies and subscriptions are the operator's plans (K6): a tenant's token
    // sees a key's, and cannot give or change one.
    document.querySelectorAll("#create-form [data-operator-only]").forEach((l) => { l.hidden = !operator; });
    document.querySelectorAll("#edit-form [data-operator-only] input").forEach((i) => { i.disabled = !operator; });
    $("plans-note").hidden = operator;
    const someTenant = [...keys.values()].find((k) => k.tenant);
    document.querySelector('[data-field="scope"]').textContent = operator
      ? "· every tenant"
      : `· tenant ${someTenant ? someTenant.tenant : "of this token"}`;
    if (operator) renderTenants();
    renderKeys();
    $("view").hidden = false;
    document.body.dataset.loadedAt = String(Date.now());
  }

  async function refresh() {
    if (!token || !mode) return;
    const button = $("refresh");
    button.disabled = true;
    try {
      if (mode === "operator") await loadTenants();
      await loadKeys(true);
      if (managed && keys.has(managed)) fillEdit(keys.get(managed));
      render();
      status(`Updated ${new Date().toLocaleTimeString("en-GB", { hour12: false })}.`, "ok");
    } catch (e) {
      status(e.message, "error");
    } finally {
      button.disabled = false;
    }
  }

  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token").value.trim() || null;
    if (token) connect();
  });
  $("refresh").addEventListener("click", () => refresh());
  $("more").addEventListener("click", async () => {
    const more = $("more");
    more.disabled = true;
    try {
      await loadKeys(false);
    } catch (e) {
      status(e.message, "error");
    } finally {
      more.disabled = false;
    }
  });
  $("tenant-filter").addEventListener("change", () => {
    loadKeys(true).catch((e) => status(e.message, "error"));
  });
  // A form whose error is shown: the error goes once the person changes a field.
  for (const [form, box] of [["create-form", "create-error"], ["edit-form", "edit-error"], ["tenant-form", "tenant-error"]]) {
    for (const ev of ["input", "change"]) {
      $(form).addEventListener(ev, () => { if (!$(box).hidden) clearError($(box), $(form)); });
    }
  }
  $("create-form").addEventListener("submit", createKey);
  $("edit-form").addEventListener("submit", saveLimits);
  $("rotate-form").addEventListener("submit", rotate);
  $("tenant-form").addEventListener("submit", createTenant);
  $("close-manage").addEventListener("click", closeManage);
  $("revoke").addEventListener("click", () => {
    $("revoke").hidden = true;
    $("revoke-confirm").hidden = false;
    $("revoke-no").focus();
  });
  $("revoke-no").addEventListener("click", () => {
    $("revoke-confirm").hidden = true;
    $("revoke").hidden = false;
  });
  $("revoke-yes").addEventListener("click", revoke);
})();
