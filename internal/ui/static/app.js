// Corral dashboard. Plain JavaScript, no framework, nothing loaded from
// elsewhere. It talks only to the tenant-scoped /v1 API of the server that
// served it, with the API key the user signed in with.
//
// Safety rule: every string that comes from the server (program output,
// ids, messages) reaches the page through textContent or a text node,
// never through innerHTML or any other HTML parser. The server's CSP
// enforces it too (Trusted Types with no policy: HTML sinks throw).
"use strict";

(function () {
  const KEY = "corral.apiKey";
  const PAGE_SIZE = 50;
  // Stream.Text's marker between the kept head and tail of an output.
  const OMITTED = /\n\[… (\d+) bytes omitted …\]\n/;
  const FINAL = new Set(["success", "failed", "cancelled"]);

  const $ = (id) => document.getElementById(id);

  // el builds an element; children are nodes or strings (as text).
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null) continue;
      if (k === "text") e.textContent = String(v);
      else if (k === "className") e.className = v;
      else if (k === "dataset") Object.assign(e.dataset, v);
      else e.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      e.append(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return e;
  }

  function setText(id, v) {
    $(id).textContent = v === undefined || v === null ? "" : String(v);
  }

  // ---- API ----------------------------------------------------------------

  class APIError extends Error {
    constructor(status, body) {
      const e = (body && body.error) || {};
      super(e.message || "HTTP " + status);
      this.status = status;
      this.code = e.code || "";
      this.field = e.field || "";
    }
  }

  function key() {
    return sessionStorage.getItem(KEY) || "";
  }

  async function api(path, opts) {
    opts = opts || {};
    const headers = Object.assign({ Authorization: "Bearer " + key(), Accept: "application/json" }, opts.headers || {});
    const resp = await fetch(path, {
      method: opts.method || "GET", headers, signal: opts.signal,
      credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer",
    });
    let body = null;
    const text = await resp.text();
    if (text) {
      try { body = JSON.parse(text); } catch (_) { body = null; }
    }
    if (!resp.ok) {
      const err = new APIError(resp.status, body);
      if (resp.status === 401 && !opts.signin) {
        signOut("Your key was refused; sign in again.");
      }
      throw err;
    }
    return body;
  }

  // ---- formatting ---------------------------------------------------------

  function fmtTime(s) {
    if (!s) return "";
    const d = new Date(s);
    if (isNaN(d)) return s;
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }
  function fmtMS(n) {
    return n === undefined || n === null ? "–" : n + " ms";
  }
  function fmtBytes(n) {
    if (n === undefined || n === null) return "";
    if (n < 1024) return n + " B";
    const units = ["KiB", "MiB", "GiB", "TiB"];
    let v = n, i = -1;
    do { v /= 1024; i++; } while (v >= 1024 && i < units.length - 1);
    return v.toFixed(v < 10 ? 1 : 0) + " " + units[i];
  }
  function fmtPct(x) {
    return x === undefined || x === null ? "–" : (x * 100).toFixed(1) + "%";
  }
  function plural(n, one, many) {
    return n + " " + (n === 1 ? one : many);
  }

  // ---- views and routing --------------------------------------------------

  let viewAbort = null; // aborts the current view's requests and streams

  function show(view) {
    for (const s of document.querySelectorAll(".view")) s.hidden = s.id !== "view-" + view;
    $("top").hidden = view === "signin";
    for (const a of document.querySelectorAll("nav a")) a.classList.remove("active");
    const nav = view === "execution" ? "executions" : view === "sandbox" ? "sandboxes" : view;
    const a = $("nav-" + nav);
    if (a) a.classList.add("active");
  }

  function route() {
    if (viewAbort) viewAbort.abort();
    viewAbort = new AbortController();
    const signal = viewAbort.signal;
    if (!key()) {
      show("signin");
      document.title = "Sign in · Corral";
      $("signin-key").focus();
      return;
    }
    const k = key();
    setText("who", "key …" + k.slice(-4));
    const hash = location.hash.replace(/^#/, "") || "/overview";
    const [path, qs] = hash.split("?", 2);
    const params = new URLSearchParams(qs || "");
    let m;
    if (path === "/overview") {
      show("overview");
      document.title = "Overview · Corral";
      loadOverview(signal);
    } else if (path === "/executions") {
      show("executions");
      document.title = "Executions · Corral";
      loadList(params, signal);
    } else if ((m = path.match(/^\/executions\/([^/]+)$/))) {
      show("execution");
      const id = decodeURIComponent(m[1]);
      document.title = id + " · Corral";
      loadExecution(id, signal);
    } else if (path === "/sandboxes") {
      show("sandboxes");
      document.title = "Sandboxes · Corral";
      loadSandboxes(params, signal);
    } else if ((m = path.match(/^\/sandboxes\/([^/]+)$/))) {
      show("sandbox");
      const id = decodeURIComponent(m[1]);
      document.title = id + " · Corral";
      loadSandbox(id, signal);
    } else {
      location.hash = "#/overview";
    }
  }

  function signOut(message) {
    sessionStorage.removeItem(KEY);
    setText("signin-error", message || "");
    $("signin-key").value = "";
    // The hash stays, so signing in again returns to the same page.
    route();
  }

  async function signIn(ev) {
    ev.preventDefault();
    const k = $("signin-key").value.trim();
    setText("signin-error", "");
    if (!k) return;
    sessionStorage.setItem(KEY, k);
    try {
      await api("/v1/executions?limit=1", { signin: true });
    } catch (err) {
      sessionStorage.removeItem(KEY);
      $("signin-key").value = "";
      $("signin-key").focus();
      setText("signin-error", err.status === 401 ? "This key is not valid here." : "Sign-in failed: " + err.message);
      return;
    }
    $("signin-key").value = "";
    if (!location.hash || location.hash === "#/signin") location.hash = "#/overview";
    else route();
  }

  // ---- overview -----------------------------------------------------------

  async function loadOverview(signal) {
    setText("ov-error", "");
    const win = $("ov-window").value;
    let st;
    try {
      st = await api("/v1/stats?window=" + encodeURIComponent(win), { signal });
    } catch (err) {
      if (err.name !== "AbortError") setText("ov-error", "Could not load the overview: " + err.message);
      return;
    }
    if (signal.aborted) return;
    const range = $("ov-range");
    range.textContent = "Executions created from " + fmtTime(st.since) + " to " + fmtTime(st.until) + ".";
    range.dataset.since = st.since;
    range.dataset.until = st.until;
    setText("ov-executions", st.executions);
    setText("ov-qps", st.qps.toFixed(3));
    setText("ov-success", fmtPct(st.success_rate));
    setText("ov-finished", st.finished);
    for (const [prefix, p] of [["ov-lat", st.latency_ms], ["ov-dur", st.duration_ms]]) {
      for (const q of ["p50", "p95", "p99"]) {
        const dd = $(prefix + "-" + q);
        dd.textContent = p.count ? fmtMS(p[q]) : "–";
        dd.dataset.ms = p.count ? String(p[q]) : "";
      }
      setText(prefix + "-count", plural(p.count, "value", "values") + (p.count ? ", max " + fmtMS(p.max) : ""));
    }

    const shareRows = (tbody, rows, name) => {
      tbody.replaceChildren(...rows.map((r) => el("tr", {},
        el("td", { text: r[name] }),
        el("td", { className: "num", text: r.count }),
        el("td", {}, el("meter", { min: 0, max: 1, value: r.share }), " " + fmtPct(r.share)))));
    };
    shareRows($("ov-errors").tBodies[0], st.error_types, "type");
    $("ov-errors-empty").hidden = st.error_types.length > 0;
    shareRows($("ov-tiers").tBodies[0], st.tiers, "tier");
    $("ov-tiers-empty").hidden = st.tiers.length > 0;

    const statuses = Object.entries(st.by_status || {}).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
    $("ov-status").tBodies[0].replaceChildren(...statuses.map(([s, n]) => el("tr", {},
      el("td", {}, el("a", { href: "#/executions?status=" + encodeURIComponent(s), text: s })),
      el("td", { className: "num", text: n }))));

    $("ov-pool").tBodies[0].replaceChildren(...st.pool.map((p) => el("tr", {},
      el("td", { text: p.tier }), el("td", { text: p.image }),
      el("td", { className: "num", text: p.idle }), el("td", { className: "num", text: p.hits }),
      el("td", { className: "num", text: p.misses }), el("td", { text: fmtPct(p.hit_rate) }))));
    $("ov-pool-empty").hidden = st.pool.length > 0;
  }

  // ---- executions list ----------------------------------------------------

  const FILTERS = [
    ["f-session", "session_id"], ["f-status", "status"], ["f-error", "error_type"],
    ["f-language", "language"], ["f-sort", "sort"],
  ];

  // cursors[i] is the cursor of page i+1 for the current filters.
  let pages = { filters: "", cursors: [""], index: 0 };

  function filtersFromForm() {
    const p = new URLSearchParams();
    for (const [id, name] of FILTERS) {
      const v = $(id).value.trim();
      if (v && !(name === "sort" && v === "-created_at")) p.set(name, v);
    }
    if ($("f-exit").checked) p.set("exit_code_ne", "0");
    return p;
  }

  function formFromFilters(p) {
    for (const [id, name] of FILTERS) $(id).value = p.get(name) || (name === "sort" ? "-created_at" : "");
    $("f-exit").checked = p.get("exit_code_ne") === "0";
  }

  async function loadList(params, signal) {
    formFromFilters(params);
    setText("ex-list-error", "");
    const filters = new URLSearchParams(params);
    filters.delete("page");
    const fkey = filters.toString();
    if (pages.filters !== fkey) pages = { filters: fkey, cursors: [""], index: 0 };
    const q = new URLSearchParams(filters);
    q.set("limit", String(PAGE_SIZE));
    const cursor = pages.cursors[pages.index];
    if (cursor) q.set("cursor", cursor);
    let res;
    try {
      res = await api("/v1/executions?" + q.toString(), { signal });
    } catch (err) {
      if (err.name === "AbortError") return;
      setText("ex-list-error", (err.field ? err.field + ": " : "") + err.message);
      $("exec-table").tBodies[0].replaceChildren();
      return;
    }
    if (signal.aborted) return;
    if (res.next_cursor) pages.cursors[pages.index + 1] = res.next_cursor;
    else pages.cursors.length = pages.index + 1;
    const rows = res.executions.map((r) => {
      const href = "#/executions/" + encodeURIComponent(r.execution_id);
      return el("tr", { className: "status-" + r.status, dataset: { id: r.execution_id } },
        el("td", { text: fmtTime(r.created_at) }),
        el("td", {}, el("a", { href, className: "exec-link", text: r.execution_id })),
        el("td", { text: r.session_id || "" }),
        el("td", { text: r.language }),
        el("td", {}, el("span", { className: "badge " + r.status, text: r.status })),
        el("td", { text: r.error ? r.error.type : "" }),
        el("td", { className: "num exit", text: r.exit_code === undefined ? "" : r.exit_code }),
        el("td", { className: "num", text: FINAL.has(r.status) ? fmtMS(r.duration_ms) : "" }),
        el("td", { text: r.tier || "" }));
    });
    $("exec-table").tBodies[0].replaceChildren(...rows);
    $("exec-empty").hidden = rows.length > 0;
    setText("page-no", "page " + (pages.index + 1));
    $("page-prev").disabled = pages.index === 0;
    $("page-first").disabled = pages.index === 0;
    $("page-next").disabled = !res.next_cursor;
  }

  function applyFilters(ev) {
    if (ev) ev.preventDefault();
    const target = "#/executions" + (filtersFromForm().toString() ? "?" + filtersFromForm().toString() : "");
    if (location.hash === target) route();
    else location.hash = target;
  }

  function turnPage(delta) {
    if (delta === 0) pages.index = 0;
    else pages.index = Math.max(0, Math.min(pages.cursors.length - 1, pages.index + delta));
    route();
  }

  // ---- one execution ------------------------------------------------------

  // renderStream shows one stream of a final record: its head and, when the
  // middle was dropped, the marker and the tail, each as text.
  function renderStream(name, text, bytes, lines, truncated) {
    const box = $(name);
    const parts = [];
    const m = truncated ? OMITTED.exec(text) : null;
    if (m) {
      parts.push(el("div", { className: "part-label", text: "head" }));
      parts.push(el("pre", { className: "output-text head", text: text.slice(0, m.index) }));
      parts.push(el("p", { className: "omitted", text: "… " + m[1] + " bytes omitted …" }));
      parts.push(el("div", { className: "part-label", text: "tail" }));
      parts.push(el("pre", { className: "output-text tail", text: text.slice(m.index + m[0].length) }));
    } else {
      parts.push(el("pre", { className: "output-text", text: text }));
    }
    box.replaceChildren(...parts);
    setText(name + "-meta", fmtBytes(bytes) + " · " + plural(lines, "line", "lines") +
      (truncated ? " · middle omitted, head and tail kept" : ""));
  }

  function fact(dl, name, value) {
    if (value === undefined || value === null || value === "") return;
    dl.append(el("dt", { text: name }), el("dd", { text: value }));
  }

  function safeURL(u) {
    try {
      const url = new URL(u, location.href);
      return url.protocol === "https:" || url.protocol === "http:" ? url.href : null;
    } catch (_) {
      return null;
    }
  }

  function renderRecord(r) {
    setText("ex-id", r.execution_id);
    const badge = $("ex-status");
    badge.textContent = r.status;
    badge.className = "badge " + r.status;
    const live = !FINAL.has(r.status);
    $("ex-cancel").hidden = !live;
    const v = $("ex-verdict");
    v.hidden = !r.error;
    if (r.error) {
      setText("ex-error-type", r.error.type);
      setText("ex-retryable", r.error.retryable ? "retryable" : "not retryable");
      setText("ex-error-message", r.error.message);
    }
    const dl = $("ex-facts");
    dl.replaceChildren();
    fact(dl, "Session", r.session_id);
    fact(dl, "Language", r.language);
    fact(dl, "Exit code", r.exit_code === undefined ? "" : String(r.exit_code));
    fact(dl, "Signal", r.signal);
    fact(dl, "Duration", FINAL.has(r.status) ? fmtMS(r.duration_ms) : "");
    fact(dl, "Queued", fmtMS(r.queue_ms));
    fact(dl, "Peak memory", r.peak_memory_mb ? r.peak_memory_mb + " MB" : "");
    fact(dl, "Tier", r.tier ? r.tier + (r.tier_reason ? " (" + r.tier_reason + ")" : "") : "");
    fact(dl, "Image", r.image);
    if (r.limits) {
      const l = r.limits;
      fact(dl, "Limits", [l.timeout_ms ? l.timeout_ms + " ms" : "", l.memory_mb ? l.memory_mb + " MB" : "",
        l.cpu_cores ? l.cpu_cores + " CPU" : "", l.disk_mb ? l.disk_mb + " MB disk" : ""].filter(Boolean).join(", "));
    }
    fact(dl, "Limits hit", (r.limits_hit || []).map((h) => h.limit + ": " + h.detail).join("; "));
    fact(dl, "Created", fmtTime(r.created_at));
    fact(dl, "Started", fmtTime(r.started_at));
    fact(dl, "Finished", fmtTime(r.finished_at));
    if (r.callback) fact(dl, "Callback", r.callback.state + " after " + plural(r.callback.attempts, "attempt", "attempts"));
    $("ex-summary-box").hidden = !r.summary;
    setText("ex-summary", r.summary || "");

    if (!live) {
      renderStream("stdout", r.stdout || "", r.stdout_bytes, r.stdout_lines, r.stdout_truncated);
      renderStream("stderr", r.stderr || "", r.stderr_bytes, r.stderr_lines, r.stderr_truncated);
    }

    const arts = r.artifacts || [];
    $("ex-artifacts").tBodies[0].replaceChildren(...arts.map((a) => {
      const href = a.url ? safeURL(a.url) : null;
      const name = href ? el("a", { href, rel: "noopener noreferrer", download: "", text: a.path }) : a.path;
      return el("tr", {},
        el("td", {}, name),
        el("td", { className: "num", text: fmtBytes(a.size) }),
        el("td", { text: a.mime || "" }),
        el("td", { className: "hash", text: a.sha256 || "" }),
        el("td", { text: fmtTime(a.expires_at) }));
    }));
    $("ex-artifacts-empty").hidden = arts.length > 0;
    $("ex-skipped").replaceChildren(...(r.artifacts_skipped || []).map((s) =>
      el("li", { text: "skipped " + s.path + ": " + s.reason })));
  }

  async function loadExecution(id, signal) {
    setText("ex-error", "");
    $("ex-notice").hidden = true;
    $("ex-live").hidden = true;
    for (const s of ["stdout", "stderr"]) {
      $(s).replaceChildren();
      setText(s + "-meta", "");
    }
    let r;
    try {
      r = await api("/v1/executions/" + encodeURIComponent(id), { signal });
    } catch (err) {
      if (err.name === "AbortError") return;
      setText("ex-id", id);
      setText("ex-error", err.status === 404 ? "No such execution." : "Could not load it: " + err.message);
      return;
    }
    if (signal.aborted) return;
    renderRecord(r);
    if (!FINAL.has(r.status)) follow(id, signal);
  }

  // follow shows an execution's output while it runs, from the SSE events
  // endpoint (read with fetch, since EventSource cannot send the key), and
  // the final record once it is done. A dropped stream resumes after the
  // last event seen.
  async function follow(id, signal) {
    const out = { stdout: el("pre", { className: "output-text live-text" }), stderr: el("pre", { className: "output-text live-text" }) };
    const bytes = { stdout: 0, stderr: 0 };
    $("stdout").replaceChildren(out.stdout);
    $("stderr").replaceChildren(out.stderr);
    $("ex-live").hidden = false;
    let last = "";
    for (let attempt = 0; !signal.aborted; attempt++) {
      try {
        const headers = { Authorization: "Bearer " + key(), Accept: "text/event-stream" };
        if (last) headers["Last-Event-ID"] = last;
        const resp = await fetch("/v1/executions/" + encodeURIComponent(id) + "/events", {
          headers, signal, credentials: "omit", cache: "no-store",
        });
        if (!resp.ok) throw new APIError(resp.status, null);
        const reader = resp.body.getReader();
        const dec = new TextDecoder();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let cut;
          while ((cut = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, cut);
            buf = buf.slice(cut + 2);
            const ev = { id: "", type: "message", data: [] };
            for (const line of block.split("\n")) {
              if (line.startsWith(":")) continue;
              const i = line.indexOf(":");
              const f = i < 0 ? line : line.slice(0, i);
              const v = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
              if (f === "id") ev.id = v;
              else if (f === "event") ev.type = v;
              else if (f === "data") ev.data.push(v);
            }
            if (ev.id) last = ev.id;
            if (!ev.data.length) continue;
            const data = JSON.parse(ev.data.join("\n"));
            if (ev.type === "stdout" || ev.type === "stderr") {
              out[ev.type].append(document.createTextNode(data.text));
              bytes[ev.type] += new TextEncoder().encode(data.text).length;
              setText(ev.type + "-meta", fmtBytes(bytes[ev.type]) + " so far");
            } else if (ev.type === "status") {
              const b = $("ex-status");
              b.textContent = data.status;
              b.className = "badge " + data.status;
            } else if (ev.type === "notice") {
              const n = $("ex-notice");
              n.textContent = data.message;
              n.hidden = false;
            } else if (ev.type === "done") {
              $("ex-live").hidden = true;
              renderRecord(data);
              return;
            }
          }
        }
      } catch (err) {
        if (signal.aborted || err.name === "AbortError") return;
        if (err.status === 404 || err.status === 401) {
          setText("ex-error", "Live output stopped: " + err.message);
          return;
        }
      }
      // The stream ended without a done event: try again shortly.
      await new Promise((res) => setTimeout(res, Math.min(5000, 250 * 2 ** Math.min(attempt, 5))));
    }
  }

  async function cancelExecution() {
    const id = $("ex-id").textContent;
    if (!id) return;
    try {
      await api("/v1/executions/" + encodeURIComponent(id) + "/cancel", { method: "POST" });
    } catch (err) {
      setText("ex-error", "Cancel failed: " + err.message);
    }
  }

  // ---- live sandboxes -----------------------------------------------------

  // fmtUntil is how long until the time s, as "4m 05s" ("expired" if past).
  function fmtUntil(s) {
    const ms = new Date(s) - Date.now();
    if (isNaN(ms)) return "";
    if (ms <= 0) return "expired";
    let sec = Math.floor(ms / 1000);
    const h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60);
    sec %= 60;
    const two = (n) => String(n).padStart(2, "0");
    return h ? h + "h " + two(m) + "m" : m ? m + "m " + two(sec) + "s" : sec + "s";
  }

  // metaChips shows a metadata map as key=value chips, sorted by key.
  function metaChips(md) {
    return Object.keys(md || {}).sort().map((k) => el("span", { className: "meta", dataset: { key: k }, text: k + "=" + md[k] }));
  }

  // The metadata filter is typed as "key=value, key2=value2" (a value may
  // hold spaces, not commas) and kept in the address as metadata.key=value,
  // the API's own query form.
  function metaFromText(text) {
    const p = new URLSearchParams();
    for (const raw of text.split(",")) {
      const pair = raw.trim();
      if (!pair) continue;
      const i = pair.indexOf("=");
      if (i <= 0) throw new Error("give metadata as key=value: " + pair);
      p.set("metadata." + pair.slice(0, i), pair.slice(i + 1));
    }
    return p;
  }

  function metaToText(params) {
    const out = [];
    for (const [k, v] of params) if (k.startsWith("metadata.")) out.push(k.slice("metadata.".length) + "=" + v);
    return out.join(", ");
  }

  async function loadSandboxes(params, signal) {
    $("sb-metadata").value = metaToText(params);
    setText("sb-list-error", "");
    const q = new URLSearchParams();
    for (const [k, v] of params) if (k.startsWith("metadata.")) q.append(k, v);
    let res;
    try {
      res = await api("/v1/sandboxes" + (q.toString() ? "?" + q.toString() : ""), { signal });
    } catch (err) {
      if (err.name === "AbortError") return;
      setText("sb-list-error", (err.field ? err.field + ": " : "") + err.message);
      $("sb-table").tBodies[0].replaceChildren();
      return;
    }
    if (signal.aborted) return;
    const rows = res.sandboxes.map((s) => el("tr", { dataset: { id: s.sandbox_id } },
      el("td", {}, el("a", { href: "#/sandboxes/" + encodeURIComponent(s.sandbox_id), className: "sb-link", text: s.sandbox_id })),
      el("td", { text: s.language }),
      el("td", { text: s.image }),
      el("td", { text: s.tier }),
      el("td", {}, el("span", { className: "badge " + s.state, text: s.state })),
      el("td", { text: fmtTime(s.created_at) }),
      el("td", { className: "expires", title: fmtTime(s.expires_at), text: fmtUntil(s.expires_at) }),
      el("td", { className: "num", text: s.executions }),
      el("td", { className: "num", text: s.restarts }),
      el("td", { className: "metadata" }, ...metaChips(s.metadata))));
    $("sb-table").tBodies[0].replaceChildren(...rows);
    $("sb-empty").hidden = rows.length > 0;
  }

  function applySandboxFilter(ev) {
    if (ev) ev.preventDefault();
    let p;
    try {
      p = metaFromText($("sb-metadata").value.trim());
    } catch (err) {
      setText("sb-list-error", err.message);
      return;
    }
    const target = "#/sandboxes" + (p.toString() ? "?" + p.toString() : "");
    if (location.hash === target) route();
    else location.hash = target;
  }

  function procState(p) {
    if (p.running) return "running";
    const x = p.exit;
    if (!x) return "ended";
    if (x.error) return "ended: " + x.error;
    return "exit " + x.exit_code + (x.signal ? " (" + x.signal + ")" : "") + " after " + fmtMS(x.duration_ms);
  }

  async function loadSandbox(id, signal) {
    setText("sb-id", id);
    setText("sb-error", "");
    $("sb-confirm").hidden = true;
    $("sb-kill").disabled = false;
    $("sb-facts").replaceChildren();
    $("sb-procs").tBodies[0].replaceChildren();
    $("sb-procs-empty").hidden = true;
    $("sb-audit").tBodies[0].replaceChildren();
    $("sb-audit-note").hidden = true;
    // The sandbox's audit events (oldest first); none when the server
    // keeps no trail (404) or the call fails: the page shows the rest.
    const trail = api("/v1/audit?limit=" + auditPage + "&sandbox_id=" + encodeURIComponent(id), { signal })
      .catch((err) => (err.name === "AbortError" ? null : { failed: err }));
    let s, procs;
    try {
      [s, procs] = await Promise.all([
        api("/v1/sandboxes/" + encodeURIComponent(id), { signal }),
        api("/v1/sandboxes/" + encodeURIComponent(id) + "/processes", { signal }),
      ]);
    } catch (err) {
      if (err.name === "AbortError") return;
      setText("sb-state", "");
      $("sb-kill").disabled = true;
      setText("sb-error", err.status === 404 ? "No such live sandbox (it may have ended)." : "Could not load it: " + err.message);
      return;
    }
    if (signal.aborted) return;
    const badge = $("sb-state");
    badge.textContent = s.state;
    badge.className = "badge " + s.state;
    const dl = $("sb-facts");
    fact(dl, "Language", s.language);
    fact(dl, "Image", s.image);
    fact(dl, "Tier", s.tier);
    if (s.limits) {
      const l = s.limits;
      fact(dl, "Limits", [l.memory_mb ? l.memory_mb + " MB" : "", l.cpus ? l.cpus + " CPU" : "",
        l.pids ? l.pids + " pids" : "", l.disk_mb ? l.disk_mb + " MB disk" : ""].filter(Boolean).join(", "));
    }
    if (s.network && s.network.allow && s.network.allow.length) fact(dl, "Network", s.network.allow.join(", "));
    if (s.metadata && Object.keys(s.metadata).length) {
      dl.append(el("dt", { text: "Metadata" }), el("dd", { id: "sb-meta" }, ...metaChips(s.metadata)));
    }
    fact(dl, "Created", fmtTime(s.created_at));
    fact(dl, "Expires", fmtTime(s.expires_at) + " (in " + fmtUntil(s.expires_at) + ")");
    fact(dl, "Executions", String(s.executions));
    fact(dl, "Restarts", String(s.restarts));
    const rows = procs.processes.map((p) => el("tr", { dataset: { pid: p.pid } },
      el("td", { className: "num", text: p.pid }),
      el("td", { text: p.tag || "" }),
      el("td", { className: "cmd", text: (p.cmd || []).join(" ") }),
      el("td", {}, el("span", { className: "badge proc " + (p.running ? "running" : "ended"), text: procState(p) })),
      el("td", { text: fmtTime(p.started_at) })));
    $("sb-procs").tBodies[0].replaceChildren(...rows);
    $("sb-procs-empty").hidden = rows.length > 0;
    showAudit(await trail, id);
  }

  const auditPage = 200;

  function showAudit(page, id) {
    const note = $("sb-audit-note");
    $("sb-audit-section").hidden = false;
    if (!page) return;
    if (page.failed) {
      if (page.failed.status === 404) {
        $("sb-audit-section").hidden = true;
        return;
      }
      note.textContent = "Could not load the audit trail: " + page.failed.message;
      note.hidden = false;
      return;
    }
    const rows = page.events.map((e) => el("tr", {},
      el("td", { className: "num", text: e.seq }),
      el("td", { text: fmtTime(e.time) }),
      el("td", { className: "cmd", text: e.key_id || "" }),
      el("td", { text: e.action }),
      el("td", {}, el("span", { className: "badge " + (e.outcome === "ok" ? "success" : "failed"), text: e.outcome })),
      el("td", { className: "cmd", text: auditDetails(e) })));
    $("sb-audit").tBodies[0].replaceChildren(...rows);
    if (!rows.length) note.textContent = "No events yet (they are written a fraction of a second after each call).";
    else if (page.next_cursor) note.textContent = "The first " + rows.length + " events; all of them: corral audit --sandbox " + id + " --all";
    note.hidden = rows.length > 0 && !page.next_cursor;
  }

  function auditDetails(e) {
    const parts = Object.keys(e.fields || {}).sort().map((k) => k + "=" + e.fields[k]);
    if (e.error) parts.push("error: " + e.error);
    return parts.join("  ");
  }

  async function killSandbox() {
    const id = $("sb-id").textContent;
    $("sb-confirm").hidden = true;
    if (!id) return;
    $("sb-kill").disabled = true;
    try {
      await api("/v1/sandboxes/" + encodeURIComponent(id), { method: "DELETE" });
    } catch (err) {
      $("sb-kill").disabled = false;
      setText("sb-error", "Kill failed: " + err.message);
      return;
    }
    location.hash = "#/sandboxes";
  }

  // ---- wiring -------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    $("signin-form").addEventListener("submit", signIn);
    $("signout").addEventListener("click", () => { location.hash = "#/signin"; signOut(""); });
    $("filters").addEventListener("submit", applyFilters);
    $("f-clear").addEventListener("click", () => { formFromFilters(new URLSearchParams()); applyFilters(); });
    for (const id of ["f-status", "f-error", "f-sort", "f-exit"]) $(id).addEventListener("change", () => applyFilters());
    $("page-first").addEventListener("click", () => turnPage(0));
    $("page-prev").addEventListener("click", () => turnPage(-1));
    $("page-next").addEventListener("click", () => turnPage(1));
    $("ov-window").addEventListener("change", () => route());
    $("ov-refresh").addEventListener("click", () => route());
    $("ex-cancel").addEventListener("click", cancelExecution);
    $("sb-filters").addEventListener("submit", applySandboxFilter);
    $("sb-clear").addEventListener("click", () => { $("sb-metadata").value = ""; applySandboxFilter(); });
    $("sb-refresh").addEventListener("click", () => route());
    $("sb-reload").addEventListener("click", () => route());
    $("sb-kill").addEventListener("click", () => { $("sb-confirm").hidden = false; $("sb-kill-no").focus(); });
    $("sb-kill-no").addEventListener("click", () => { $("sb-confirm").hidden = true; });
    $("sb-kill-yes").addEventListener("click", killSandbox);
    window.addEventListener("hashchange", route);
    route();
  });
})();
