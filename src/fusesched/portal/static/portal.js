// fusesched portal: one page, plain JavaScript, no dependencies. It calls the controller's JSON
// API with the user's bearer token (kept in sessionStorage), so every scoping rule is the
// server's. Text from the server is only ever set as textContent, never parsed as HTML.
"use strict";

(function () {
  const TOKEN_KEY = "fusesched.token";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const STATES = ["Pending", "Running", "Completed", "Failed", "Cancelled"];
  const FINISHED = new Set(["Completed", "Failed", "Cancelled"]);
  const JOB_TYPES = {
    batch: "Batch (one task or a few independent ones)",
    hpc: "HPC / MPI (a gang of tasks with an MPI host list)",
    "ai-train": "AI training (torchrun rendezvous, GPUs)",
    "ai-infer": "AI inference (a long-running server)",
    service: "Service (runs until cancelled)",
  };
  const LAUNCHER_OF = { hpc: "mpi", "ai-train": "torchrun" };
  const LOG_KEEP = 1000000; // characters of a followed log kept on the page

  let me = null; // who is logged in (GET /v1/portal/me)
  let resubmitted = null; // the job the next job page was resubmitted from, and the warnings
  let timers = []; // polling of the current page
  let page = 0; // bumps on every navigation: late answers of an old page are dropped
  let loginMessage = ""; // why the user was logged out, shown on the login form

  // ------------------------------------------------------------------ small helpers

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "text") el.textContent = v;
      else el.setAttribute(k, String(v));
    }
    for (const c of children.flat()) if (c) el.append(c);
    return el;
  }

  const main = () => document.getElementById("main");
  function status(text) { document.getElementById("status").textContent = text || ""; }

  function fmtTime(t) {
    if (t === null || t === undefined) return "—";
    const d = new Date(t * 1000);
    const pad = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  function fmtDur(sec) {
    if (sec === null || sec === undefined || !isFinite(sec)) return "—";
    sec = Math.max(0, sec);
    if (sec < 60) return `${sec.toFixed(sec < 10 ? 1 : 0)} s`;
    if (sec < 3600) return `${Math.floor(sec / 60)} min ${Math.round(sec % 60)} s`;
    if (sec < 86400) return `${Math.floor(sec / 3600)} h ${Math.round((sec % 3600) / 60)} min`;
    return `${(sec / 86400).toFixed(1)} d`;
  }
  // A time limit as `fusesched update --time` and sbatch's --time read it (parse_slurm_time in
  // submit/syntax.py): MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
  const SLURM_TIME = /^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$/;
  const TIME_FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS";
  const NO_LIMIT = new Set(["unlimited", "infinite", "-1"]);

  function parseSlurmTime(text) {
    // seconds; null for no limit ("0", "unlimited"); throws with a message for people
    const value = text.trim();
    if (NO_LIMIT.has(value.toLowerCase())) return null;
    const m = SLURM_TIME.exec(value);
    if (!m) {
      throw new Error(`"${value}" is not a time: write ${TIME_FORMATS} ` +
        "(30 is 30 minutes, 1:30:00 an hour and a half, 2-00 two days).");
    }
    const [days, a, b, c] = m.slice(1).map((x) => (x === undefined ? null : Number(x)));
    let sec;
    if (days !== null) sec = days * 86400 + a * 3600 + (b || 0) * 60 + (c || 0);
    else if (b === null) sec = a * 60;
    else if (c === null) sec = a * 60 + b;
    else sec = a * 3600 + b * 60 + c;
    return sec > 0 ? sec : null;
  }

  function fmtLimit(sec) {
    // seconds as a time parseSlurmTime reads back: [D-]HH:MM:SS
    const whole = Math.round(sec);
    const pad = (n) => String(n).padStart(2, "0");
    const hms = `${pad(Math.floor((whole % 86400) / 3600))}:${pad(Math.floor((whole % 3600) / 60))}` +
      `:${pad(whole % 60)}`;
    return whole >= 86400 ? `${Math.floor(whole / 86400)}-${hms}` : hms;
  }
  function fmtNum(v) {
    if (v === 0) return "0";
    return Math.abs(v) >= 1000 || Math.abs(v) < 0.001 ? v.toExponential(1)
      : String(+v.toPrecision(3));
  }
  function fmtBytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let k = 0;
    while (n >= 1024 && k < units.length - 1) { n /= 1024; k += 1; }
    return `${k ? n.toFixed(1) : n} ${units[k]}`;
  }
  // A Kubernetes-style quantity as the API gives it ("49367544Ki", "500m", "4") made
  // readable: memory and storage in bytes' units (47.1 GiB), others as plain numbers.
  const QTY_SUFFIX = { m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
    Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };
  function fmtQty(resource, q) {
    const m = /^(-?[0-9.]+)([a-zA-Z]{0,2})$/.exec(String(q));
    if (!m || !(m[2] in QTY_SUFFIX || m[2] === "")) return String(q);
    const v = Number(m[1]) * (m[2] ? QTY_SUFFIX[m[2]] : 1);
    if (!isFinite(v)) return String(q);
    if (/memory|storage/.test(resource)) return fmtBytes(v);
    return String(+v.toPrecision(4));
  }
  function pct(x) { return `${Math.round((x || 0) * 100)}%`; }
  function badge(state) { return h("span", { class: `badge ${state}`, text: state }); }
  function now() { return Date.now() / 1000; }

  // ------------------------------------------------------------------ the API

  class ApiError extends Error {
    constructor(status, detail) {
      super(ApiError.text(detail) || `HTTP ${status}`);
      this.status = status;
      this.detail = detail;
    }
    static text(detail) {
      if (typeof detail === "string") return detail;
      if (Array.isArray(detail)) return detail.map(fieldMessage).join("; ");
      return detail ? JSON.stringify(detail) : "";
    }
  }

  function fieldMessage(item) {
    const loc = (item.loc || []).filter((p) => p !== "body").join(" → ");
    const msg = String(item.msg || "invalid").replace(/^Value error, /, "");
    return loc ? `${loc}: ${msg}` : msg;
  }

  async function api(method, path, body, asText) {
    const token = sessionStorage.getItem(TOKEN_KEY) || "";
    const headers = { accept: asText ? "text/plain" : "application/json" };
    if (token) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (err) {
      throw new ApiError(0, `the controller cannot be reached (${err.message})`);
    }
    if (response.status === 401 && me) {
      logout("Your token is no longer valid: log in again.");
      throw new ApiError(401, "not logged in");
    }
    if (!response.ok) {
      let detail = "";
      try { detail = (await response.json()).detail; } catch (e) { detail = response.statusText; }
      throw new ApiError(response.status, detail);
    }
    if (asText === "chunk") { // a log's text, the byte offset to ask for next, whether
      // the log is complete (null: the controller is older than complete logs) and whether
      // more is written past the text (cut short at the read's cap: ask again at once)
      const next = Number(response.headers.get("x-next-offset"));
      const complete = response.headers.get("x-log-complete");
      return { text: await response.text(), next: Number.isFinite(next) ? next : null,
        complete: complete === null ? null : complete === "true",
        confirmed: response.headers.get("x-log-confirmed") === "true",
        more: response.headers.get("x-log-more") === "true" };
    }
    return asText ? response.text() : response.json();
  }

  // ------------------------------------------------------------------ session and routing

  function decodePart(part) {
    // a hand-typed or truncated link may hold a bad %-escape ("%ZZ"): show it as it is
    try { return decodeURIComponent(part); } catch (e) { return part; }
  }

  function every(ms, fn) {
    const id = setInterval(fn, ms);
    timers.push(id);
  }

  function stopTimers() {
    for (const id of timers) clearInterval(id);
    timers = [];
  }

  function logout(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    me = null;
    document.body.classList.remove("operator");
    document.getElementById("nav").hidden = true;
    document.getElementById("who").hidden = true;
    loginMessage = message || "";
    if (location.hash !== "#/login") location.hash = "#/login";
    else route();
  }

  async function ensureMe() {
    if (me) return me;
    try { me = await api("GET", "/v1/portal/me"); } catch (e) {
      // unreachable (status 0): keep the token and say so; refused: log in (again)
      if (e.status === 0) throw e;
      sessionStorage.removeItem(TOKEN_KEY);
      return null;
    }
    document.body.classList.toggle("operator", me.operator);
    document.getElementById("nav").hidden = false;
    document.getElementById("who").hidden = false;
    document.getElementById("who-text").textContent =
      me.auth ? `${me.user} · ${me.tenant} · ${me.role}` : "authentication off";
    document.getElementById("logout").hidden = !me.auth; // nothing to log out of
    return me;
  }

  const PAGES = {
    login: viewLogin,
    jobs: viewJobs,
    job: viewJob,
    submit: viewSubmit,
    cluster: viewCluster,
    queues: viewQueues,
    charts: viewCharts,
    whatif: viewWhatIf,
  };
  const OPERATOR_PAGES = new Set(["cluster", "queues", "charts", "whatif"]);

  async function route() {
    stopTimers();
    page += 1;
    const mine = page;
    const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodePart);
    let name = parts[0] || "jobs";
    if (!(name in PAGES)) name = "jobs";
    let who;
    try { who = name === "login" ? null : await ensureMe(); } catch (err) {
      if (mine !== page) return;
      main().replaceChildren(h("h1", { text: "fusesched" }), errorBox(
        "The controller cannot be reached", [err.message, "Reload the page to try again."]));
      return;
    }
    if (name !== "login" && !who) {
      if (mine !== page) return;
      name = "login";
      if (location.hash !== "#/login") history.replaceState(null, "", "#/login");
    }
    if (mine !== page) return;
    if (name === "login" && me) { location.hash = "#/jobs"; return; }
    if (OPERATOR_PAGES.has(name) && !me.operator) name = "jobs";
    for (const a of document.querySelectorAll("#nav a")) {
      if (a.dataset.page === name || (name === "job" && a.dataset.page === "jobs")) {
        a.setAttribute("aria-current", "page");
      } else a.removeAttribute("aria-current");
    }
    status("");
    const root = main();
    root.replaceChildren();
    try {
      await PAGES[name](root, parts.slice(1), () => mine === page);
    } catch (err) {
      if (mine === page) root.append(errorBox("This page could not be shown", [err.message]));
    }
    if (mine === page) {
      const heading = root.querySelector("h1");
      document.title = heading ? `${heading.textContent} · fusesched` : "fusesched";
    }
  }

  function errorBox(title, messages) {
    return h("div", { class: "errors", role: "alert" },
      h("h2", { text: title }),
      h("ul", {}, messages.map((m) => h("li", { text: m }))));
  }

  function focusHeading(root) {
    const heading = root.querySelector("h1");
    if (heading) { heading.setAttribute("tabindex", "-1"); heading.focus(); }
  }

  // ------------------------------------------------------------------ login

  async function viewLogin(root) {
    document.title = "Log in · fusesched";
    const input = h("input", {
      id: "token", name: "token", type: "password", autocomplete: "off", required: true,
      "aria-describedby": "token-hint", spellcheck: "false",
    });
    const error = h("div", { id: "login-error", class: "errors", role: "alert",
      hidden: !loginMessage, text: loginMessage });
    loginMessage = "";
    const form = h("form", { class: "panel login", "aria-labelledby": "login-title" },
      h("h1", { id: "login-title", text: "Log in" }),
      h("div", { class: "field" },
        h("label", { for: "token", text: "API token" }),
        input,
        h("div", { id: "token-hint", class: "hint",
          text: "Your token (fsk_…), from your admin or `fusesched token create`." })),
      error,
      h("button", { type: "submit", class: "primary", text: "Log in" }));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      error.hidden = true;
      const token = input.value.trim();
      if (!token) { error.textContent = "Enter a token."; error.hidden = false; input.focus(); return; }
      const odd = token.match(/[^\x21-\x7e]/u); // a token is printable ASCII (fsk_…)
      if (odd) {
        const code = odd[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
        error.textContent = "Not a valid token: it contains a space, an invisible or a " +
          `non-ASCII character (U+${code}), perhaps pasted along with it.`;
        error.hidden = false;
        input.focus();
        return;
      }
      sessionStorage.setItem(TOKEN_KEY, token);
      me = null;
      try {
        await api("GET", "/v1/portal/me");
      } catch (err) {
        sessionStorage.removeItem(TOKEN_KEY);
        error.textContent = err.status === 401 ? `Not a valid token: ${err.message}` : err.message;
        error.hidden = false;
        input.focus();
        return;
      }
      location.hash = "#/jobs";
    });
    root.append(form);
    input.focus();
  }

  // ------------------------------------------------------------------ jobs

  const filters = { state: "", queue: "", user: "", text: "" };

  async function viewJobs(root, _args, alive) {
    const stateSel = h("select", { id: "f-state", name: "state" },
      h("option", { value: "", text: "Any state" }),
      STATES.map((st) => h("option", { value: st, text: st })));
    stateSel.value = filters.state;
    const queueIn = h("input", { id: "f-queue", name: "queue", value: filters.queue, size: 10 });
    const userIn = h("input", { id: "f-user", name: "user", value: filters.user, size: 10 });
    const textIn = h("input", { id: "f-text", name: "text", value: filters.text, size: 14,
      type: "search" });
    const form = h("form", { class: "panel row", role: "search", "aria-label": "Filter jobs" },
      h("div", {}, h("label", { for: "f-state", text: "State" }), stateSel),
      h("div", {}, h("label", { for: "f-queue", text: "Queue" }), queueIn),
      h("div", {}, h("label", { for: "f-user", text: "User" }), userIn),
      h("div", {}, h("label", { for: "f-text", text: "Name or id contains" }), textIn),
      h("div", {}, h("button", { type: "submit", text: "Apply" })));
    const body = h("tbody");
    const table = h("div", { class: "table-wrap" }, h("table", { id: "jobs" },
      h("caption", { class: "muted", text: "Newest first; refreshed every 2 seconds." }),
      h("thead", {}, h("tr", {},
        ["Job", "Name", "User", "Tenant", "Queue", "Type", "State", "Submitted", "Waited / ran",
          "Nodes"].map((t) => h("th", { scope: "col", text: t })))),
      body));
    root.append(h("h1", { text: "Jobs" }), form, table);

    async function load() {
      const q = new URLSearchParams({ limit: "200" });
      if (filters.state) q.append("state", filters.state);
      if (filters.queue) q.set("queue", filters.queue);
      if (filters.user) q.set("user", filters.user);
      let jobs;
      try { jobs = await api("GET", `/v1/jobs?${q}`); } catch (err) {
        if (alive()) status(`Could not load jobs: ${err.message}`);
        return;
      }
      if (!alive()) return;
      const needle = filters.text.toLowerCase();
      const shown = jobs.filter((j) => !needle || j.id.includes(needle) ||
        (j.name || "").toLowerCase().includes(needle));
      body.replaceChildren(...shown.map(jobRow));
      if (!shown.length) {
        body.append(h("tr", {}, h("td", { colspan: 10, class: "muted", text: "No jobs." })));
      }
      status(`${shown.length} job(s) · updated ${fmtTime(now()).slice(11)}`);
    }

    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      filters.state = stateSel.value;
      filters.queue = queueIn.value.trim();
      filters.user = userIn.value.trim();
      filters.text = textIn.value.trim();
      load();
    });
    await load();
    focusHeading(root);
    every(2000, load);
  }

  function jobRow(j) {
    // (a job that ended without starting waited until its end, not until now)
    const waited = (j.start_time || j.end_time || now()) - (j.submit_time || now());
    const ran = j.start_time ? (j.end_time || now()) - j.start_time : null;
    return h("tr", { "data-job": j.id, "data-state": j.state },
      h("td", {}, h("a", { href: `#/job/${encodeURIComponent(j.id)}`, text: j.id })),
      h("td", { text: j.name || "" }),
      h("td", { text: j.user }),
      h("td", { text: j.tenant }),
      h("td", { text: j.queue }),
      h("td", { text: j.type }),
      h("td", {}, badge(j.state)),
      h("td", { text: fmtTime(j.submit_time) }),
      h("td", { text: `${fmtDur(waited)}${ran === null ? "" : ` / ${fmtDur(ran)}`}` }),
      h("td", { text: (j.nodes || []).join(", ") }));
  }

  // ------------------------------------------------------------------ one job

  async function viewJob(root, args, alive) {
    const id = args[0] || "";
    let detail;
    try { detail = await api("GET", `/v1/portal/jobs/${encodeURIComponent(id)}`); } catch (err) {
      root.append(h("h1", { text: `Job ${id}` }), errorBox("No such job", [err.message]));
      return;
    }
    if (!alive()) return;
    const title = h("span", {});
    const stateHolder = h("span", { id: "job-state" });
    const cancelBtn = h("button", { type: "button", class: "danger", id: "cancel",
      text: "Cancel job" });
    const resubmitBtn = h("button", { type: "button", id: "resubmit", text: "Resubmit" });
    // hold (a waiting job) or release (a held one); hidden once the job runs or has ended
    const holdBtn = h("button", { type: "button", id: "hold", text: "Hold" });
    // requeue a running job (its tasks stopped, the job queued again)
    const requeueBtn = h("button", { type: "button", id: "requeue", text: "Requeue" });
    const actionMsg = h("div", { id: "action-msg", role: "status" });
    if (resubmitted && resubmitted.to === id) { // (this job was resubmitted from that page)
      actionMsg.textContent = [`Resubmitted job ${resubmitted.from}.`,
        ...resubmitted.warnings].join(" ");
    }
    resubmitted = null;
    // change a waiting job's priority, QoS or time limit, or a running job's time limit;
    // shown while editable(detail)
    const editBtn = h("button", { type: "button", id: "edit", text: "Edit",
      "aria-expanded": "false", "aria-controls": "edit-form" });
    const edit = editForm(id, editBtn, (out, said) => {
      actionMsg.textContent = out.updated.length
        ? `Changed ${out.updated.join(", ")}: ${said}.` : "Nothing changed.";
      refresh();
    });
    const facts = h("dl", { class: "facts" });
    const placement = h("tbody");
    const energy = h("dl", { class: "facts" });
    const usage = h("dl", { class: "facts", id: "efficiency" });
    const timeline = h("div", { id: "timeline" });
    const events = h("tbody");
    const spec = h("pre", { id: "spec", tabindex: "0" });
    const logs = h("pre", { id: "logs", tabindex: "0", "aria-live": "off" });
    const logsNote = h("p", { id: "logs-note", class: "muted" });
    let logsComplete = null; // the log is complete (null: the controller does not say)
    const follow = h("input", { type: "checkbox", id: "follow", checked: true });
    let offset = 0;
    const decoder = new TextEncoder();

    root.append(
      h("h1", {}, title, " ", stateHolder),
      h("div", { class: "actions" }, cancelBtn, holdBtn, editBtn, requeueBtn, resubmitBtn),
      edit.form,
      actionMsg,
      h("div", { class: "grid2" },
        h("section", { class: "panel", "aria-labelledby": "h-sum" },
          h("h2", { id: "h-sum", text: "Summary" }), facts),
        h("section", { class: "panel", "aria-labelledby": "h-energy" },
          h("h2", { id: "h-energy", text: "Energy" }), energy)),
      h("section", { class: "panel", "aria-labelledby": "h-eff" },
        h("h2", { id: "h-eff", text: "Efficiency (used against requested)" }), usage),
      h("section", { class: "panel", "aria-labelledby": "h-place" },
        h("h2", { id: "h-place", text: "Placement" }),
        h("div", { class: "table-wrap" }, h("table", { id: "placement" },
          h("thead", {}, h("tr", {}, ["Task", "Node", "GPU devices", "State", "Exit code",
            "Started", "Ended"].map((t) => h("th", { scope: "col", text: t })))),
          placement))),
      h("section", { class: "panel", "aria-labelledby": "h-time" },
        h("h2", { id: "h-time", text: "Timeline" }), timeline),
      h("section", { class: "panel", "aria-labelledby": "h-logs" },
        h("h2", { id: "h-logs", text: "Logs" }),
        h("div", { class: "row" }, h("label", { for: "follow" }, follow, " Follow the log")),
        logs, logsNote),
      h("section", { class: "panel", "aria-labelledby": "h-ev" },
        h("h2", { id: "h-ev", text: "Events" }),
        h("div", { class: "table-wrap" }, h("table", { id: "events" },
          h("thead", {}, h("tr", {}, ["Time", "Event", "Node", "Details"].map(
            (t) => h("th", { scope: "col", text: t })))),
          events))),
      h("section", { class: "panel", "aria-labelledby": "h-spec" },
        h("h2", { id: "h-spec", text: "Specification (as submitted)" }), spec));

    function render(d) {
      const j = d.job;
      title.replaceChildren(`Job ${j.id}`, ...(j.name ? [" — ", h("bdi", { text: j.name })] : []));
      stateHolder.replaceChildren(badge(j.state));
      cancelBtn.disabled = FINISHED.has(j.state);
      holdBtn.hidden = j.state !== "Pending";
      requeueBtn.hidden = j.state !== "Running";
      holdBtn.textContent = j.phase === "held" ? "Release" : "Hold";
      const cur = changeable(d.request);
      const mode = editable(d);
      if (edit.open && edit.mode !== mode) { // the open form closes: say why
        actionMsg.textContent = `The job is ${j.state} now: ` + (!mode
          ? "it can no longer be changed."
          : mode === "running" ? "only its time limit can still be changed."
            : "its priority, QoS and time limit can be changed again.");
      }
      edit.show(mode, cur, j);
      const rows = [
        ["User", j.user], ["Tenant", j.tenant], ["Queue", j.queue], ["Type", j.type],
        ["State", `${j.state} (${j.phase}${j.completing ? ", completing" : ""})`],
        ["Reason", j.reason || "—"],
        ["Priority", cur.priority], ["QoS", cur.qos],
        ["Time limit", cur.limit ? `${cur.limit} (${fmtDur(d.request.walltime_s)})` : "none"],
        ["Exit code", j.exit_code === null ? "—" : j.exit_code],
        ["Array", j.array_parent ? `member of job array ${j.array_parent}` : "—"],
        ["Pool", j.pool || "—"], ["Nodes", (j.nodes || []).join(", ") || "—"],
        ...(j.state === "Pending" && j.phase !== "held" ? [["Expected start",
          d.expected_start ? `${fmtTime(d.expected_start)} on ${d.expected_nodes.join(", ")}` +
            " (if every job runs to its time limit)" : "not within 7 days"]] : []),
        ["Submitted", fmtTime(j.submit_time)], ["Started", fmtTime(j.start_time)],
        ["Ended", fmtTime(j.end_time)],
        ["Waited", j.start_time ? fmtDur(j.start_time - j.submit_time) : "—"],
        ["Ran", j.start_time ? fmtDur((j.end_time || now()) - j.start_time) : "—"],
      ];
      facts.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", { text: k }),
        h("dd", { text: String(v) })]));
      const kwh = j.energy_kwh;
      energy.replaceChildren(
        h("dt", { text: "Total" }),
        h("dd", { id: "energy-total",
          text: kwh === null || kwh === undefined ? "known when the job has ended"
            : `${kwh.toFixed(6)} kWh` }),
        h("dt", { text: "Measured" }),
        h("dd", { text: j.energy_measured_kwh === null || j.energy_measured_kwh === undefined
          ? "—" : `${j.energy_measured_kwh.toFixed(6)} kWh (GPU power readings)` }),
        h("dt", { text: "Estimated" }),
        h("dd", { text: kwh === null || kwh === undefined ? "—"
          : `${(kwh - (j.energy_measured_kwh || 0)).toFixed(6)} kWh (power model)` }));
      placement.replaceChildren(...(j.tasks.length ? j.tasks.map((t) => h("tr", {},
        h("td", { text: t.task_id }), h("td", { text: t.node || "—" }),
        h("td", { text: t.gpu_indices.length ? t.gpu_indices.join(", ") : "—" }),
        h("td", {}, badge(t.state)),
        h("td", { text: t.exit_code === null ? "—" : t.exit_code }),
        h("td", { text: fmtTime(t.start_time) }), h("td", { text: fmtTime(t.end_time) })))
        : [h("tr", {}, h("td", { colspan: 7, class: "muted", text: "Not placed yet." }))]));
      timeline.replaceChildren(timelineSvg(d.timeline));
      events.replaceChildren(...d.events.map((e) => h("tr", {},
        h("td", { text: fmtTime(e.time) }), h("td", { text: e.kind }),
        h("td", { text: e.node || "" }),
        h("td", { text: Object.entries(e.data || {}).map(([k, v]) =>
          `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join(", ") }))));
      spec.textContent = JSON.stringify(d.request, null, 2);
    }

    // One read of the log at a time: the page refreshes every second, and a read slower than
    // that (a slow link, or a long log's reads one after another) would otherwise be joined
    // by another from the same offset, and its text shown twice. A call meanwhile waits for it.
    let logsReading = null;
    function pollLogs() {
      if (!logsReading) logsReading = readLogs().finally(() => { logsReading = null; });
      return logsReading;
    }

    async function readLogs() {
      if (logsComplete) return; // all of it is shown, and nothing more will be written to it
      let chunk;
      try {
        chunk = await api("GET", `/v1/jobs/${encodeURIComponent(id)}/logs?offset=${offset}`,
          undefined, "chunk");
      } catch (err) { return; }
      const text = chunk.text;
      if (!alive()) return;
      if (text) {
        // the server says where the text ends in bytes: not UTF-8 bytes come as U+FFFD
        offset = chunk.next !== null ? chunk.next : offset + decoder.encode(text).length;
        logs.append(document.createTextNode(text));
        if (logs.textContent.length > LOG_KEEP * 2) { // keep the page light on endless logs
          logs.textContent = `[… earlier output not shown here]\n${logs.textContent.slice(-LOG_KEEP)}`;
        }
        if (follow.checked) logs.scrollTop = logs.scrollHeight;
        if (chunk.more) return readLogs(); // (cut short: the rest now, not in a second)
      }
      logsComplete = chunk.complete;
      if (!logsComplete) return;
      logs.dataset.complete = "true";
      if (!chunk.confirmed) {
        logsNote.textContent = "The end of this output may be missing: its agent did not "
          + "confirm it (the task was lost with its node, or its agent is too old to say).";
      }
    }

    let usageFinal = false; // the efficiency shown is the ended job's: not asked again
    function renderUsage(e) {
      // what `fusesched eff` prints: null values were not measured (the notes say why)
      const share = (v) => (v === null || v === undefined ? "" : ` (${v.toFixed(1)} %)`);
      const rows = [];
      if (e.cpu_seconds !== null) {
        rows.push(["CPU", `${fmtDur(e.cpu_seconds)} of CPU time on ${fmtNum(e.cpus)} cores` +
          share(e.cpu_efficiency_pct)]);
      }
      if (e.max_rss_bytes !== null) {
        rows.push(["Memory", `peak ${fmtBytes(e.max_rss_bytes)}` + (e.memory_bytes === null
          ? " (none requested)" : ` of ${fmtBytes(e.memory_bytes)}` +
            share(e.memory_efficiency_pct))]);
      }
      if (e.gpus > 0) {
        rows.push(["GPUs", `${fmtNum(e.gpus)}; utilisation ` + (e.gpu_util_mean === null ? "not read"
          : `${e.gpu_util_mean.toFixed(1)} %`) + (e.max_gpu_memory_bytes === null ? ""
          : `, memory peak ${fmtBytes(e.max_gpu_memory_bytes)}`)]);
      }
      e.notes.forEach((note) => rows.push(["Note", note]));
      if (!rows.length) rows.push(["—", "nothing measured yet"]);
      usage.replaceChildren(...rows.flatMap(([k, v]) => [h("dt", { text: k }),
        h("dd", { text: v })]));
    }

    async function refresh() {
      try { detail = await api("GET", `/v1/portal/jobs/${encodeURIComponent(id)}`); } catch (e) {
        return;
      }
      if (!alive()) return;
      render(detail);
      if (detail.job.start_time && !usageFinal) {
        try {
          const e = await api("GET", `/v1/jobs/${encodeURIComponent(id)}/efficiency`);
          renderUsage(e);
          usageFinal = FINISHED.has(e.state); // an ended job's use no longer changes
        } catch (e) { /* an older controller: the panel keeps what it had */ }
      } else if (!detail.job.start_time) {
        usage.replaceChildren(h("dt", { text: "—" }), h("dd", { text: "known once it runs" }));
      }
      await pollLogs();
      status(`updated ${fmtTime(now()).slice(11)}`);
    }

    cancelBtn.addEventListener("click", async () => {
      if (!window.confirm(`Cancel job ${id}?`)) return;
      cancelBtn.disabled = true;
      try {
        const out = await api("POST", `/v1/jobs/${encodeURIComponent(id)}/cancel`, {});
        actionMsg.textContent = out.cancelled.length ? `Cancelling ${out.cancelled.join(", ")}.`
          : "Nothing to cancel: the job has ended.";
      } catch (err) {
        actionMsg.replaceChildren(errorBox("Cancel failed", [err.message]));
        cancelBtn.disabled = false;
      }
      refresh();
    });
    holdBtn.addEventListener("click", async () => {
      const release = holdBtn.textContent === "Release";
      const reason = release ? null : window.prompt(`Hold job ${id}: why? (optional)`, "");
      if (reason === null && !release) return; // the prompt was dismissed
      holdBtn.disabled = true;
      const path = `/v1/jobs/${encodeURIComponent(id)}/${release ? "release" : "hold"}`;
      try {
        const out = await api("POST", path, release ? {} : { reason });
        const ids = release ? out.released : out.held;
        actionMsg.textContent = ids.length
          ? `${release ? "Released" : "Held"} ${ids.join(", ")}.` : "Nothing changed.";
      } catch (err) {
        actionMsg.replaceChildren(errorBox(release ? "Release failed" : "Hold failed",
          [err.message]));
      }
      holdBtn.disabled = false;
      refresh();
    });
    requeueBtn.addEventListener("click", async () => {
      if (!window.confirm(`Requeue job ${id}? Its tasks are stopped and it waits again.`)) return;
      requeueBtn.disabled = true;
      try {
        const out = await api("POST", `/v1/jobs/${encodeURIComponent(id)}/requeue`, {});
        actionMsg.textContent = `Requeueing ${out.requeued.join(", ")}.`;
      } catch (err) {
        actionMsg.replaceChildren(errorBox("Requeue failed", [err.message]));
      }
      requeueBtn.disabled = false;
      refresh();
    });
    resubmitBtn.addEventListener("click", async () => {
      // the controller resubmits the stored request, as the one who asks and not held, with
      // the submitting shell's environment when that is the job's own user (docs/PORTAL.md)
      const arr = detail.request.array;
      const notes = [];
      if (arr) notes.push("This job is a member of an array: Resubmit submits the whole " +
        `array again (indices ${arr.start} to ${arr.stop}).`);
      const owner = detail.job.user;
      if (me && me.auth && owner !== me.user) notes.push(`This is ${owner}'s job: it is ` +
        "resubmitted as you, and the environment of the shell that submitted it (its PATH, " +
        `virtual environment) goes only with ${owner}'s own resubmission.`);
      if (notes.length && !window.confirm(`${notes.join(" ")} Go on?`)) return;
      resubmitBtn.disabled = true;
      try {
        const out = await api("POST", `/v1/jobs/${encodeURIComponent(id)}/resubmit`, {});
        const hash = submittedHash(out);
        resubmitted = { to: decodeURIComponent(hash.split("/").pop()), from: id,
          warnings: out.warnings || [] };
        location.hash = hash;
      } catch (err) {
        actionMsg.replaceChildren(errorBox("Resubmit failed", [err.message]));
      }
      resubmitBtn.disabled = false;
    });

    render(detail);
    await pollLogs();
    focusHeading(root);
    let endedAt = null; // logs may still arrive for a few seconds after the end
    every(1000, () => {
      // (a completing job's page refreshes on until its tasks are gone)
      if (FINISHED.has(detail.job.state) && !detail.job.completing) endedAt = endedAt || now();
      else endedAt = null;
      if (endedAt === null || now() - endedAt < 10) refresh();
      else if (logsComplete === false) pollLogs(); // (the rest of its output is on the way)
    });
  }

  // Which jobs the page offers to change (the job's detail), and how: "waiting" (priority,
  // QoS and time limit), "running" (the time limit only; not in an external cluster, which
  // keeps its own), or null: what the server changes (a 409 for anything else).
  function editable(detail) {
    const state = detail.job.state;
    if (state === "Pending") return "waiting";
    if (state === "Running" && !detail.external) return "running";
    return null;
  }

  // The QoS tiers a job may name, highest first (GET /v1/portal/me: the tenancy
  // configuration's, else gold, silver and bronze), as <option>s; a ``current`` tier that is
  // not among them (the configuration changed since) is offered too, so that it stays shown.
  function qosOptions(current) {
    const tiers = me && me.qos_tiers && me.qos_tiers.length ? me.qos_tiers
      : ["gold", "silver", "bronze"];
    const label = (name, i) => {
      if (i < 0) return `${name} (not a configured tier)`;
      if (tiers.length > 1 && i === 0) return `${name} (highest)`;
      if (tiers.length > 1 && i === tiers.length - 1) return `${name} (lowest)`;
      return name;
    };
    const names = current && !tiers.includes(current) ? [...tiers, current] : tiers;
    return names.map((name) => h("option", { value: name,
      text: label(name, tiers.indexOf(name)) }));
  }

  // What a change starts from, as the form's fields show it: the stored request, which the
  // server changes along with the job.
  function changeable(request) {
    return {
      priority: String(request.priority === undefined ? 0 : request.priority),
      qos: request.qos || "silver",
      limit: request.walltime_s ? fmtLimit(request.walltime_s) : "",
    };
  }

  const PRIORITY_MIN = -(2 ** 31); // the API's bounds (a 32-bit integer, as the store's column)
  const PRIORITY_MAX = 2 ** 31 - 1;
  const MAX_LIMIT_S = 10 * 365 * 86400; // the longest time limit the API takes

  // The Edit form of a job's page: POST /v1/jobs/{id}/update with the fields changed only.
  // A waiting job's priority, QoS and time limit; a running job's time limit alone (the
  // server refuses the others, 409), with a note when the new limit has passed already.
  // show(mode, current, job) on every refresh (mode: editable(detail)); done(answer, what)
  // after a change.
  function editForm(id, button, done) {
    const fields = {};
    let initial = null; // the values the open form started from
    let mode = null; // what the open (or next) form changes: "waiting" or "running"
    let job = null; // the job as last shown (a running job's start, for its new limit)
    function field(name, label, input, hint) {
      input.id = `e-${name}`;
      input.name = name;
      const now = h("span", { class: "now" });
      const err = h("div", { class: "err", id: `e-${name}-err`, hidden: true });
      input.setAttribute("aria-describedby", `e-${name}-hint e-${name}-err`);
      const box = h("div", { class: "field" },
        h("label", { for: input.id, text: label }), input,
        h("div", { class: "hint", id: `e-${name}-hint` }, hint, " ", now), err);
      fields[name] = { input, err, now, box };
      return box;
    }
    const priority = h("input", { autocomplete: "off", spellcheck: "false", size: 12 });
    const qos = h("select", {}, qosOptions(null));
    const limit = h("input", { autocomplete: "off", spellcheck: "false", size: 12 });
    const summary = h("div", { id: "edit-errors", tabindex: "-1" });
    const save = h("button", { type: "submit", class: "primary", text: "Save changes" });
    const close = h("button", { type: "button", text: "Close" });
    const heading = h("h2", { id: "h-edit" });
    const only = h("p", { class: "muted", id: "edit-only", hidden: true, text: "The job is " +
      "running: only its time limit can be changed (its priority and QoS only while it " +
      "waits)." });
    const rule = h("p", { class: "muted", id: "edit-rule", hidden: !(me && me.auth &&
      me.role === "user") });
    // a running job's new limit that has passed already: said before anything is sent
    const passed = h("div", { id: "edit-passed", "aria-live": "polite" });
    const form = h("form", { class: "panel", id: "edit-form", hidden: true, novalidate: true,
      "aria-labelledby": "h-edit" },
      heading, only, rule, summary,
      h("div", { class: "grid2" },
        field("priority", "Priority", priority, "A whole number; higher starts sooner."),
        field("qos", "QoS tier", qos, ""),
        field("limit", "Time limit", limit, `As sbatch --time: ${TIME_FORMATS} ` +
          "(30 is 30 minutes).")),
      passed,
      h("div", { class: "actions" }, save, close));

    function layout() {
      // the form for ``mode``: a running job's shows its time limit alone
      const running = mode === "running";
      heading.textContent = running ? "Change the job's time limit" : "Change the waiting job";
      only.hidden = !running;
      fields.priority.box.hidden = running;
      fields.qos.box.hidden = running;
      rule.textContent = running
        ? "You may shorten the time limit; only an admin may lengthen it."
        : "You may lower the priority and the QoS and shorten the time limit; only an " +
          "admin may raise or lengthen them.";
    }
    function overdue(sec) {
      // a running job's limit of ``sec`` has passed already (by this browser's clock)
      return mode === "running" && Boolean(job && job.start_time) &&
        job.start_time + sec <= now();
    }
    function checkPassed() {
      let text = "";
      const t = limit.value.trim();
      if (!form.hidden && mode === "running" && initial && t !== initial.limit) {
        let sec = null;
        try { sec = t ? parseSlurmTime(t) : null; } catch (e) { sec = null; } // said on saving
        if (sec !== null && overdue(sec)) {
          text = `This limit has passed already: the job started at ${fmtTime(job.start_time)}` +
            `. If you save it, the job will be stopped now as timed out.`;
        }
      }
      if (passed.textContent !== text) {
        passed.replaceChildren(text ? h("p", { class: "notice", text }) : "");
      }
    }
    limit.addEventListener("input", checkPassed);

    function setOpen(open, focus) {
      form.hidden = !open;
      button.setAttribute("aria-expanded", String(open));
      if (open && focus) (mode === "running" ? limit : priority).focus();
      else if (!open && focus) button.focus();
      checkPassed();
    }
    function showProblems(problems, extra) {
      for (const [n, f] of Object.entries(fields)) {
        f.err.textContent = problems[n] || "";
        f.err.hidden = !problems[n];
        if (problems[n]) f.input.setAttribute("aria-invalid", "true");
        else f.input.removeAttribute("aria-invalid");
      }
      const label = (n) => document.querySelector(`label[for="e-${n}"]`).textContent;
      const all = Object.entries(problems).map(([n, m]) => `${label(n)}: ${m}`)
        .concat(extra || []);
      summary.replaceChildren(all.length ? errorBox("The job was not changed", all) : "");
      if (all.length) summary.focus();
    }
    function build() {
      // the fields changed since the form opened (unchanged ones are not sent), and what is
      // wrong with them
      const body = {};
      const said = [];
      const problems = {};
      const p = priority.value.trim();
      if (mode === "waiting" && p !== initial.priority) {
        const n = Number(p);
        if (!/^[+-]?\d+$/.test(p)) {
          problems.priority = "The priority must be a whole number, such as 0, 10 or -5.";
        } else if (n < PRIORITY_MIN || n > PRIORITY_MAX) {
          problems.priority = `The priority must be from ${PRIORITY_MIN} to ${PRIORITY_MAX}.`;
        } else { body.priority = n; said.push(`priority ${n}`); }
      }
      if (mode === "waiting" && qos.value !== initial.qos) {
        body.qos = qos.value;
        said.push(`QoS ${qos.value}`);
      }
      const t = limit.value.trim();
      if (t !== initial.limit) {
        try {
          const sec = t ? parseSlurmTime(t) : null;
          if (sec === null) {
            problems.limit = `A ${mode} job's time limit cannot be lifted: give a time, ` +
              "such as 30 or 1:30:00.";
          } else if (sec > MAX_LIMIT_S) {
            problems.limit = "The time limit can be at most 3650 days.";
          } else {
            body.walltime_s = sec;
            said.push(`time limit ${fmtLimit(sec)}` + (overdue(sec)
              ? " (passed already: the job is stopped as timed out)" : ""));
          }
        } catch (e) { problems.limit = e.message; }
      }
      return { body, said, problems };
    }

    button.addEventListener("click", () => {
      if (!form.hidden) { setOpen(false, true); return; }
      priority.value = initial.priority;
      qos.replaceChildren(...qosOptions(initial.qos));
      qos.value = initial.qos;
      limit.value = initial.limit;
      showProblems({});
      setOpen(true, true);
    });
    close.addEventListener("click", () => setOpen(false, true));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const { body, said, problems } = build();
      if (Object.keys(problems).length) { showProblems(problems); return; }
      if (!said.length) {
        showProblems({}, ["Nothing to change: every field holds the job's current value."]);
        return;
      }
      showProblems({});
      save.disabled = true;
      let out;
      try {
        out = await api("POST", `/v1/jobs/${encodeURIComponent(id)}/update`, body);
      } catch (err) {
        save.disabled = false;
        showProblems({}, [err.message]); // the server's reason (403: only an admin may …)
        return;
      }
      save.disabled = false;
      setOpen(false, true);
      done(out, said.join(", "));
    });

    return {
      form,
      get open() { return !form.hidden; },
      get mode() { return mode; }, // what the open form changes
      show(next, current, shown) {
        job = shown;
        button.hidden = !next;
        if (next !== mode && !form.hidden) { // ended, started or requeued: the form closes
          const focused = form.contains(document.activeElement);
          setOpen(false, false);
          if (focused && next) button.focus();
          else if (focused) document.querySelector("#main h1").focus();
        }
        if (form.hidden) { // an open form keeps what it started from
          initial = current;
          mode = next;
          layout();
        }
        fields.priority.now.textContent = `Now: ${current.priority}.`;
        fields.qos.now.textContent = `Now: ${current.qos}.`;
        const ran = mode === "running" && shown.start_time
          ? ` It has run for ${fmtDur(now() - shown.start_time)}.` : "";
        fields.limit.now.textContent = `Now: ${current.limit || "none"}.${ran}`;
        checkPassed(); // time passes: a limit typed earlier may have passed since
      },
    };
  }

  function submittedHash(out) {
    // an array has no page of its own: show its first member
    const id = out.ids && out.ids.length ? out.ids[0] : out.id;
    return `#/job/${encodeURIComponent(id)}`;
  }

  function timelineSvg(spans) {
    const width = 900;
    const rowH = 22;
    if (!spans.length) return h("p", { class: "muted", text: "No timeline yet." });
    const t0 = Math.min(...spans.map((x) => x.start));
    const t1 = Math.max(...spans.map((x) => x.end === null ? now() : x.end), t0 + 1);
    const left = 180;
    const scale = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - 20);
    const height = spans.length * rowH + 30;
    const svg = s("svg", { class: "timeline", viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-labelledby": "tl-title" },
    s("title", { id: "tl-title", text: "The job's timeline: waits, its run and each task" }));
    spans.forEach((x, i) => {
      const y = 5 + i * rowH;
      const end = x.end === null ? now() : x.end;
      const label = x.kind === "task" ? `${x.label}${x.node ? ` @ ${x.node}` : ""}` : x.label;
      svg.append(s("text", { x: 4, y: y + 14, text: label.slice(0, 28) }));
      const rect = s("rect", { x: scale(x.start), y, height: rowH - 6, class: x.kind,
        width: Math.max(2, scale(end) - scale(x.start)) });
      rect.append(s("title", { text: `${label}: ${fmtTime(x.start)} → ` +
        `${x.end === null ? "now" : fmtTime(x.end)} (${fmtDur(end - x.start)})` }));
      svg.append(rect);
    });
    const axisY = spans.length * rowH + 10;
    svg.append(s("line", { x1: left, x2: width - 20, y1: axisY, y2: axisY, stroke: "#999" }));
    svg.append(s("text", { x: left, y: axisY + 14, text: fmtTime(t0).slice(11) }));
    svg.append(s("text", { x: width - 80, y: axisY + 14, text: `+${fmtDur(t1 - t0)}` }));
    return svg;
  }

  // ------------------------------------------------------------------ submit

  async function viewSubmit(root) {
    const fields = {};
    function field(name, label, input, hint) {
      input.id = `s-${name}`;
      input.name = name;
      const err = h("div", { class: "err", id: `s-${name}-err`, hidden: true });
      const describedBy = [hint ? `s-${name}-hint` : null, `s-${name}-err`].filter(Boolean);
      input.setAttribute("aria-describedby", describedBy.join(" "));
      fields[name] = { input, err };
      return h("div", { class: "field" },
        h("label", { for: input.id, text: label }),
        input,
        hint ? h("div", { class: "hint", id: `s-${name}-hint`, text: hint }) : null,
        err);
    }
    const typeSel = h("select", {}, Object.entries(JOB_TYPES).map(
      ([v, t]) => h("option", { value: v, text: t })));
    const qosSel = h("select", {}, qosOptions(null));
    qosSel.value = (me && me.default_qos) || "silver";
    // the reservations the caller's jobs may run in (docs/RESERVATIONS.md); none: any node
    const resSel = h("select", {}, h("option", { value: "", text: "none (any node)" }));
    api("GET", "/v1/reservations").then((answer) => {
      const mine = answer.reservations.filter((r) => !r.maintenance && (!me ||
        r.users.includes(me.user) || r.tenants.includes(me.tenant)));
      resSel.append(...mine.map((r) => h("option", { value: r.name,
        text: `${r.name}: ${r.nodes.join(", ")}, ${fmtTime(r.start)} to ${fmtTime(r.end)}` })));
    }).catch(() => { /* an older controller: no reservations */ });
    const summary = h("div", { id: "submit-errors", tabindex: "-1" });
    const preview = h("pre", { id: "preview", tabindex: "0" });
    const form = h("form", { class: "panel", id: "submit-form", novalidate: true },
      summary,
      h("div", { class: "grid2" },
        h("div", {},
          field("type", "Job type", typeSel),
          field("name", "Name", h("input", { maxlength: 200 }), "One line, for your own use."),
          field("queue", "Queue", h("input", { value: "default" })),
          field("qos", "QoS tier", qosSel),
          field("walltime", "Time limit (minutes)", h("input", { type: "number", min: "0",
            step: "any", value: "10" }), "Also the scheduler's runtime estimate."),
          field("reservation", "Reservation", resSel,
            "Run only on a reservation's nodes, inside its window (sbatch --reservation).")),
        h("div", {},
          field("command", "Command", h("textarea", { rows: 3 }),
            "Run by /bin/sh -c in each task, e.g. python train.py --epochs 3"),
          field("replicas", "Tasks", h("input", { type: "number", min: "1", step: "1",
            value: "1" }), "A gang: all start together."),
          field("cpu", "CPU per task", h("input", { value: "1" }), "Cores: 1, 0.5 or 500m."),
          field("memory", "Memory per task", h("input", { value: "256Mi" }), "e.g. 512Mi, 4Gi."),
          field("gpu", "GPUs per task", h("input", { type: "number", min: "0", step: "1",
            value: "0" })))),
      h("details", {}, h("summary", { text: "The request that will be sent (JSON)" }), preview),
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary",
        text: "Submit job" })));
    root.append(h("h1", { text: "Submit a job" }), form);

    function build() {
      const v = (n) => fields[n].input.value.trim();
      const problems = {};
      const type = v("type");
      const name = fields.name.input.value;
      if (/[\n\r\t]/.test(name)) problems.name = "The name must be one line.";
      if (!v("queue")) problems.queue = "Give a queue (default: default).";
      const minutes = Number(v("walltime"));
      if (v("walltime") && (!isFinite(minutes * 60) || minutes <= 0)) {
        problems.walltime = "The time limit must be a positive number of minutes " +
          "(and not astronomically large).";
      }
      if (!v("command")) problems.command = "Give a command to run.";
      const replicas = Number(v("replicas"));
      if (!Number.isSafeInteger(replicas) || replicas < 1) {
        problems.replicas = "Tasks must be a whole number, at least 1.";
      }
      if (!v("cpu")) problems.cpu = "Give the CPU each task needs, e.g. 1 or 500m.";
      else if (!/^\d+(\.\d+)?m?$/.test(v("cpu"))) problems.cpu = "CPU is a number of cores (2, 0.5) or millicores (500m).";
      if (v("memory") && !/^\d+(\.\d+)?([KMGTPE]i?|[kmgtpe])?$/.test(v("memory"))) {
        problems.memory = "Memory is a quantity such as 512Mi or 4Gi.";
      }
      const gpus = Number(v("gpu") || "0");
      if (!Number.isSafeInteger(gpus) || gpus < 0) problems.gpu = "GPUs must be a whole number (0 or more).";
      const resources = { cpu: v("cpu") };
      if (v("memory")) resources.memory = v("memory");
      if (gpus > 0) resources["nvidia.com/gpu"] = String(gpus);
      const group = { name: "main", replicas, resources, argv: ["sh", "-c", v("command")] };
      if (LAUNCHER_OF[type]) group.launcher = LAUNCHER_OF[type];
      const request = { type, queue: v("queue"), qos: v("qos"), groups: [group] };
      if (name.trim()) request.name = name.trim();
      if (v("walltime") && !problems.walltime) request.walltime_s = minutes * 60;
      if (v("reservation")) request.reservation = v("reservation");
      return { request, problems };
    }

    function showProblems(problems, extra) {
      for (const [n, f] of Object.entries(fields)) {
        const msg = problems[n];
        f.err.textContent = msg || "";
        f.err.hidden = !msg;
        if (msg) f.input.setAttribute("aria-invalid", "true");
        else f.input.removeAttribute("aria-invalid");
      }
      const all = Object.entries(problems).map(([n, m]) => `${labelOf(n)}: ${m}`)
        .concat(extra || []);
      summary.replaceChildren(all.length ? errorBox("The job was not submitted", all) : "");
      if (all.length) summary.focus();
    }
    const labelOf = (n) => (fields[n] ? document.querySelector(`label[for="s-${n}"]`).textContent
      : n);

    form.addEventListener("input", () => { preview.textContent = JSON.stringify(build().request, null, 2); });
    preview.textContent = JSON.stringify(build().request, null, 2);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const { request, problems } = build();
      if (Object.keys(problems).length) { showProblems(problems); return; }
      showProblems({});
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      try {
        const out = await api("POST", "/v1/jobs", request);
        location.hash = submittedHash(out);
      } catch (err) {
        button.disabled = false;
        const mapped = {};
        const other = [];
        if (Array.isArray(err.detail)) {
          for (const item of err.detail) {
            const key = fieldOfLoc(item.loc || [], item.msg);
            if (key && !mapped[key]) mapped[key] = fieldMessage({ msg: item.msg });
            else other.push(fieldMessage(item));
          }
        } else other.push(`${err.status ? `${err.status}: ` : ""}${err.message}`);
        showProblems(mapped, other);
      }
    });
    focusHeading(root);
  }

  const RESOURCE_FIELDS = { cpu: "cpu", memory: "memory", "nvidia.com/gpu": "gpu", gpu: "gpu" };

  function fieldOfLoc(loc, msg) {
    const path = loc.filter((p) => p !== "body");
    const last = path[path.length - 1];
    if (path[0] === "groups") {
      if (path.includes("resources")) {
        // the check of the whole mapping names the resource first: "memory: quantity …"
        const named = String(msg || "").replace(/^Value error, /, "").split(":")[0];
        return RESOURCE_FIELDS[last] || RESOURCE_FIELDS[named] || "cpu";
      }
      if (path.includes("replicas")) return "replicas";
      if (path.includes("argv")) return "command";
      return null;
    }
    return { walltime_s: "walltime", name: "name", queue: "queue", qos: "qos", type: "type" }[
      path[0]] || null;
  }

  // ------------------------------------------------------------------ operators: cluster

  function heatColour(f) {
    // 0 → pale blue, 1 → deep red (through yellow): readable with its number on top
    const x = Math.max(0, Math.min(1, f || 0));
    const stops = [[232, 240, 250], [255, 214, 102], [207, 34, 46]];
    const [a, b, t] = x < 0.5 ? [stops[0], stops[1], x * 2] : [stops[1], stops[2], (x - 0.5) * 2];
    const c = a.map((v, i) => Math.round(v + (b[i] - v) * t));
    return { bg: `rgb(${c.join(",")})`, ink: x > 0.75 ? "#fff" : "#1b1f24" };
  }

  function heatCell(fraction, text, label, extraClass) {
    const { bg, ink } = heatColour(fraction);
    const td = h("td", { class: `cell ${extraClass || ""}`, title: label, "aria-label": label },
      text);
    td.style.backgroundColor = bg;
    td.style.color = ink;
    return td;
  }

  function legend() {
    return h("div", { class: "legend", "aria-hidden": "true" }, "0%",
      [0, 0.25, 0.5, 0.75, 1].map((f) => {
        const sw = h("span", { class: "swatch" });
        sw.style.backgroundColor = heatColour(f).bg;
        return sw;
      }), "100% in use");
  }

  async function viewCluster(root, _args, alive) {
    const poolsBox = h("div", { class: "grid2", id: "pools" });
    const heat = h("div", { id: "heatmap" });
    const bad = h("tbody");
    const reserved = h("tbody");
    const drainMsg = h("div", { id: "drain-msg", role: "status" });
    root.append(h("h1", { text: "Cluster" }),
      h("h2", { text: "Pools" }), poolsBox,
      h("h2", { id: "h-heat", text: "Occupancy heat map" }),
      h("p", { class: "muted", text: "Each cell: the share of a node's CPU, memory, GPUs in " +
        "use; then each GPU or MIG instance, and the job holding it." }),
      legend(), heat, drainMsg,
      h("h2", { id: "h-bad", text: "Drained, failed and powered-down nodes" }),
      h("div", { class: "table-wrap" }, h("table", { id: "unhealthy" },
        h("thead", {}, h("tr", {}, ["Node", "Pool", "State", "Power", "Since", "Reason"].map(
          (t) => h("th", { scope: "col", text: t })))), bad)),
      h("h2", { id: "h-res", text: "Reservations" }),
      h("p", { class: "muted", text: "Nodes set aside for a window (fusesched reservation " +
        "create): maintenance, or the named users' and tenants' jobs only." }),
      h("div", { class: "table-wrap" }, h("table", { id: "reservations" },
        h("thead", {}, h("tr", {}, ["Name", "Nodes", "Starts", "Ends", "For"].map(
          (t) => h("th", { scope: "col", text: t })))), reserved)));

    async function loadReservations() {
      let found;
      try { found = (await api("GET", "/v1/reservations")).reservations; } catch (err) {
        return; // an older controller: no reservations to show
      }
      if (!alive()) return;
      reserved.replaceChildren(...(found.length ? found.map((r) => h("tr",
        { "data-reservation": r.name },
        h("td", { text: r.name }), h("td", { text: r.nodes.join(", ") }),
        h("td", { text: `${fmtTime(r.start)}${r.active ? " (open)" : ""}` }),
        h("td", { text: fmtTime(r.end) }),
        h("td", { text: r.maintenance ? "maintenance: nobody's jobs"
          : [...r.users.map((u) => `user ${u}`), ...r.tenants.map((t) => `tenant ${t}`)]
            .join(", ") }))) : [h("tr", {}, h("td", { colspan: 5, class: "muted",
        text: "No reservation." }))]));
    }

    async function load() {
      loadReservations();
      let c;
      try { c = await api("GET", "/v1/portal/cluster"); } catch (err) {
        if (alive()) status(`Could not load the cluster: ${err.message}`);
        return;
      }
      if (!alive()) return;
      poolsBox.replaceChildren(...c.pools.map((p) => h("section", { class: "panel" },
        h("h3", { text: `${p.name} · ${p.nodes} node(s)` }),
        h("dl", { class: "facts" }, p.resources.flatMap((r) => [h("dt", { text: r.name }),
          h("dd", {}, `${fmtQty(r.name, r.used)} of ${fmtQty(r.name, r.capacity)} (${pct(r.fraction)})`,
            bar(r.fraction, false))])))));
      const kinds = [];
      for (const n of c.nodes) for (const r of n.resources) if (!kinds.includes(r.name)) kinds.push(r.name);
      const maxDevices = Math.max(0, ...c.nodes.map((n) => n.devices.length));
      const head = h("tr", {}, h("th", { scope: "col", text: "Node" }),
        h("th", { scope: "col", text: "Pool" }), h("th", { scope: "col", text: "State" }),
        kinds.map((k) => h("th", { scope: "col", class: "res", text: k })),
        maxDevices ? h("th", { scope: "col", colspan: maxDevices, text: "GPU / MIG devices" }) : null,
        h("th", { scope: "col", text: "Drain" }));
      const rows = c.nodes.map((n) => {
        const byName = Object.fromEntries(n.resources.map((r) => [r.name, r]));
        return h("tr", { "data-node": n.name },
          h("th", { scope: "row", text: n.name }), h("td", { text: n.pool }),
          h("td", { text: n.power === "on" ? n.state : `${n.state} (${n.power})` }),
          kinds.map((k) => {
            const r = byName[k];
            if (!r) return h("td", { class: "muted", text: "—" });
            return heatCell(r.fraction, pct(r.fraction),
              `${n.name} ${k}: ${fmtQty(k, r.used)} of ${fmtQty(k, r.capacity)} in use`);
          }),
          n.devices.map((d) => {
            const what = d.mig_profile ? `MIG ${d.mig_profile} on GPU ${d.index}` : `GPU ${d.index}`;
            const name = d.mig_profile ? `${d.index}/${d.mig_profile}` : `GPU ${d.index}`;
            return heatCell(d.job_id ? 1 : 0, d.job_id ? `${name}: #${d.job_id}` : name,
              `${n.name} ${what}${d.model ? ` (${d.model})` : ""}: ` +
              (d.job_id ? `held by job ${d.job_id}` : "free"), "dev");
          }),
          maxDevices > n.devices.length ? h("td", { colspan: maxDevices - n.devices.length }) : null,
          h("td", {}, n.drainable ? drainButton(n) : ""));
      });
      if (!c.nodes.length) {
        const none = "No node has registered yet: start an agent (fusesched agent) or join one.";
        poolsBox.replaceChildren(h("p", { class: "muted", id: "no-nodes", text: none }));
        heat.replaceChildren(h("p", { class: "muted", text: "No nodes." }));
        bad.replaceChildren(h("tr", {}, h("td", { colspan: 6, class: "muted", text: "No nodes." })));
        status(`updated ${fmtTime(now()).slice(11)}`);
        return;
      }
      heat.replaceChildren(h("div", { class: "table-wrap" }, h("table", { class: "heat",
        "aria-labelledby": "h-heat" }, h("thead", {}, head), h("tbody", {}, rows))));
      bad.replaceChildren(...(c.unhealthy.length ? c.unhealthy.map((n) => h("tr", {},
        h("td", { text: n.name }), h("td", { text: n.pool }), h("td", { text: n.state }),
        h("td", { text: n.power }), h("td", { text: fmtTime(n.since) }),
        h("td", { text: n.reason || "—" })))
        : [h("tr", {}, h("td", { colspan: 6, class: "muted",
          text: "Every node is up and powered on." }))]));
      status(`updated ${fmtTime(now()).slice(11)}${c.power_saving ? "" : " · power saving off"}`);
    }
    function drainButton(n) {
      // an operator drain (docs/LIVE.md "Draining nodes"): nothing new is placed there
      const undrain = n.drain_reason !== null && n.drain_reason !== undefined;
      const button = h("button", { type: "button", class: "small",
        "aria-label": `${undrain ? "Undrain" : "Drain"} ${n.name}`,
        title: undrain ? `drained: ${n.drain_reason}` : "", text: undrain ? "Undrain" : "Drain" });
      button.addEventListener("click", async () => {
        let body = {};
        if (!undrain) {
          const reason = window.prompt(`Drain ${n.name}: why? (shown with the node)`,
            "maintenance");
          if (reason === null || !reason.trim()) return; // dismissed, or no reason given
          body = { reason };
        }
        button.disabled = true;
        const path = `/v1/nodes/${encodeURIComponent(n.name)}/${undrain ? "undrain" : "drain"}`;
        try {
          const out = await api("POST", path, body);
          drainMsg.textContent =
            `${out.node}: ${out.state}${out.drain_reason ? ` (${out.drain_reason})` : ""}.`;
        } catch (err) {
          drainMsg.replaceChildren(errorBox(undrain ? "Undrain failed" : "Drain failed",
            [err.message]));
        }
        load();
      });
      return button;
    }

    await load();
    focusHeading(root);
    every(3000, load);
  }

  function bar(fraction, borrow) {
    const inner = h("span");
    inner.style.width = `${Math.round(Math.max(0, Math.min(1, fraction || 0)) * 100)}%`;
    return h("div", { class: borrow ? "bar borrow" : "bar", "aria-hidden": "true" }, inner);
  }

  // ------------------------------------------------------------------ operators: queues

  async function viewQueues(root, _args, alive) {
    const queues = h("tbody");
    const fair = h("tbody");
    const note = h("p", { class: "muted" });
    root.append(h("h1", { text: "Queues and tenants" }), note,
      h("div", { class: "table-wrap" }, h("table", { id: "queues" },
        h("thead", {}, h("tr", {}, ["Queue", "Tenant", "Cohort", "Shares", "Pending", "Running",
          "Quota (flavour / resource: used of nominal, borrowed, still available)"].map(
          (t) => h("th", { scope: "col", text: t })))), queues)),
      h("h2", { text: "Fair-share standing" }),
      h("div", { class: "table-wrap" }, h("table", { id: "fairshare" },
        h("thead", {}, h("tr", {}, ["Account", "Shares", "Share of siblings", "Usage",
          "Usage of siblings", "Level FS", "Rank", "Factor"].map(
          (t) => h("th", { scope: "col", text: t })))), fair)));

    async function load() {
      let q;
      try { q = await api("GET", "/v1/portal/queues"); } catch (err) {
        if (alive()) status(`Could not load queues: ${err.message}`);
        return;
      }
      if (!alive()) return;
      note.textContent = q.tenancy ? "Quotas and fair share from the tenancy configuration."
        : "This controller runs without a tenancy configuration: no quotas or fair share.";
      queues.replaceChildren(...(q.queues.length ? q.queues.map((x) => h("tr", {},
        h("th", { scope: "row", text: x.name }), h("td", { text: x.tenant || "—" }),
        h("td", { text: x.cohort || "—" }),
        h("td", { class: "num", text: x.shares === null ? "—" : x.shares }),
        h("td", { class: "num", text: x.pending }), h("td", { class: "num", text: x.running }),
        h("td", {}, x.quota.length ? x.quota.map((c) => h("div", {},
          `${c.flavor} / ${c.resource}: ${fmtQty(c.resource, c.used)} of ` +
          `${fmtQty(c.resource, c.nominal)}` +
          `${c.borrowed !== "0" ? `, borrowing ${fmtQty(c.resource, c.borrowed)}` : ""}, ` +
          `${fmtQty(c.resource, c.available)} available`,
          bar(c.fraction, c.borrowed !== "0"))) : "—")))
        : [h("tr", {}, h("td", { colspan: 7, class: "muted", text: "No queue has jobs." }))]));
      fair.replaceChildren(...(q.fairshare.length ? q.fairshare.map((f) => h("tr", {},
        h("th", { scope: "row", text: f.account }), h("td", { class: "num", text: f.shares }),
        h("td", { class: "num", text: pct(f.norm_shares) }),
        h("td", { class: "num", text: f.usage.toFixed(2) }),
        h("td", { class: "num", text: pct(f.norm_usage) }),
        h("td", { class: "num", text: f.level_fs === null ? "∞" : f.level_fs.toFixed(3) }),
        h("td", { class: "num", text: f.position === null ? "—" : f.position }),
        h("td", { class: "num", text: f.factor === null ? "—" : f.factor.toFixed(3) })))
        : [h("tr", {}, h("td", { colspan: 8, class: "muted", text: "No accounts." }))]));
      status(`updated ${fmtTime(now()).slice(11)}`);
    }
    await load();
    focusHeading(root);
    every(5000, load);
  }

  // ------------------------------------------------------------------ operators: charts

  const WINDOWS = { "-15m": "last 15 minutes", "-1h": "last hour", "-6h": "last 6 hours",
    "-24h": "last 24 hours", "-7d": "last 7 days" };
  let chartWindow = "-1h";

  async function viewCharts(root, _args, alive) {
    const sel = h("select", { id: "window" }, Object.entries(WINDOWS).map(
      ([v, t]) => h("option", { value: v, text: t })));
    sel.value = chartWindow;
    const boxes = { util: h("div", { id: "chart-util" }), wait: h("div", { id: "chart-wait" }),
      energy: h("div", { id: "chart-energy" }) };
    const table = h("details", {}, h("summary", { text: "The numbers (table)" }));
    root.append(h("h1", { text: "Utilisation, waits and energy" }),
      h("div", { class: "row panel" }, h("div", {}, h("label", { for: "window", text: "Window" }),
        sel)),
      h("section", { class: "panel", "aria-labelledby": "c1" },
        h("h2", { id: "c1", text: "Utilisation (allocated share of today's capacity)" }),
        boxes.util),
      h("section", { class: "panel", "aria-labelledby": "c2" },
        h("h2", { id: "c2", text: "Mean wait of the jobs that started" }), boxes.wait),
      h("section", { class: "panel", "aria-labelledby": "c3" },
        h("h2", { id: "c3", text: "Energy (estimated from the power model)" }), boxes.energy),
      table);

    async function load() {
      let hist;
      try {
        hist = await api("GET", `/v1/portal/history?start=${encodeURIComponent(chartWindow)}` +
          "&buckets=30");
      } catch (err) {
        if (alive()) status(`Could not load the history: ${err.message}`);
        return;
      }
      if (!alive()) return;
      const p = hist.points;
      const xs = p.map((x) => (x.start + x.end) / 2);
      boxes.util.replaceChildren(lineChart("util", xs, [
        { name: "CPU", cls: "l1", ys: p.map((x) => x.cpu_util * 100) },
        { name: "GPU", cls: "l2", ys: p.map((x) => x.gpu_util * 100) },
      ], "%", 100));
      boxes.wait.replaceChildren(barChart("wait", xs, p.map((x) => x.wait_s || 0), "s", "b1"));
      const kwh = p.map((x) => x.energy_kwh);
      const small = Math.max(...kwh) < 1; // Wh reads better than 0.0002 kWh
      boxes.energy.replaceChildren(barChart("energy", xs, small ? kwh.map((v) => v * 1000) : kwh,
        small ? "Wh" : "kWh", "b2"));
      table.replaceChildren(h("summary", { text: "The numbers (table)" }),
        h("div", { class: "table-wrap" }, h("table", {},
          h("thead", {}, h("tr", {}, ["From", "To", "CPU", "GPU", "Mean wait", "Jobs started",
            "Energy (kWh)"].map((t) => h("th", { scope: "col", text: t })))),
          h("tbody", {}, p.map((x) => h("tr", {}, h("td", { text: fmtTime(x.start) }),
            h("td", { text: fmtTime(x.end) }), h("td", { class: "num", text: pct(x.cpu_util) }),
            h("td", { class: "num", text: pct(x.gpu_util) }),
            h("td", { class: "num", text: x.wait_s === null ? "—" : fmtDur(x.wait_s) }),
            h("td", { class: "num", text: x.started }),
            h("td", { class: "num", text: fmtNum(x.energy_kwh) })))))));
      status(`${hist.cpus} CPUs, ${hist.gpus} GPUs · updated ${fmtTime(now()).slice(11)}`);
    }
    sel.addEventListener("change", () => { chartWindow = sel.value; load(); });
    await load();
    focusHeading(root);
    every(10000, load);
  }

  const CW = 900;
  const CH = 220;
  const PAD = { l: 84, r: 16, t: 14, b: 30 };

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function frame(id, xs, top, unit, title) {
    const svg = s("svg", { class: "chart", id: `svg-${id}`, viewBox: `0 0 ${CW} ${CH}`,
      role: "img", "aria-label": title });
    svg.append(s("title", { text: title }));
    const y = (v) => PAD.t + (1 - v / top) * (CH - PAD.t - PAD.b);
    for (let i = 0; i <= 4; i += 1) {
      const v = (top * i) / 4;
      svg.append(s("line", { class: "axis", x1: PAD.l, x2: CW - PAD.r, y1: y(v), y2: y(v) }));
      svg.append(s("text", { x: PAD.l - 6, y: y(v) + 4, "text-anchor": "end",
        text: unit === "%" ? `${fmtNum(v)}%` : `${fmtNum(v)} ${unit}` }));
    }
    const x0 = xs[0];
    const x1 = xs[xs.length - 1];
    const x = (t) => PAD.l + (xs.length > 1 ? (t - x0) / (x1 - x0) : 0.5) * (CW - PAD.l - PAD.r);
    const ticks = [[0, "start"], [Math.floor(xs.length / 2), "middle"], [xs.length - 1, "end"]];
    for (const [i, anchor] of ticks) {
      if (xs[i] === undefined) continue;
      svg.append(s("text", { x: x(xs[i]), y: CH - 8, "text-anchor": anchor,
        text: fmtTime(xs[i]).slice(5, 16) }));
    }
    return { svg, x, y };
  }

  function lineChart(id, xs, series, unit, fixedTop) {
    const top = fixedTop || niceMax(Math.max(...series.flatMap((x) => x.ys)));
    const { svg, x, y } = frame(id, xs, top, unit,
      `${series.map((x) => x.name).join(" and ")} over time, in ${unit}`);
    series.forEach((ser, k) => {
      const d = ser.ys.map((v, i) => `${i ? "L" : "M"}${x(xs[i]).toFixed(1)},${y(v).toFixed(1)}`)
        .join(" ");
      svg.append(s("path", { d, class: ser.cls, "data-series": ser.name }));
      ser.ys.forEach((v, i) => {
        const dot = s("circle", { cx: x(xs[i]), cy: y(v), r: 2.5, class: ser.cls });
        dot.append(s("title", { text: `${ser.name} ${fmtTime(xs[i])}: ${v.toFixed(1)}${unit}` }));
        svg.append(dot);
      });
      svg.append(s("text", { x: CW - PAD.r - 60, y: PAD.t + 12 + 14 * k, class: `key ${ser.cls}`,
        text: `— ${ser.name}` }));
    });
    return svg;
  }

  function barChart(id, xs, ys, unit, cls) {
    const top = niceMax(Math.max(...ys));
    const { svg, x, y } = frame(id, xs, top, unit, `${id} over time, in ${unit}`);
    const w = Math.max(2, ((CW - PAD.l - PAD.r) / Math.max(1, xs.length)) * 0.7);
    ys.forEach((v, i) => {
      const rect = s("rect", { x: x(xs[i]) - w / 2, y: y(v), width: w,
        height: Math.max(0, y(0) - y(v)), class: cls });
      rect.append(s("title", { text: `${fmtTime(xs[i])}: ${fmtNum(v)} ${unit}` }));
      svg.append(rect);
    });
    return svg;
  }

  // ------------------------------------------------------------------ operators: what-if

  async function viewWhatIf(root, _args, alive) {
    const info = await api("GET", "/v1/portal/whatif");
    if (!alive()) return;
    const sel = (name, values, current) => {
      const el = h("select", { id: `w-${name}`, name },
        h("option", { value: "", text: `as today (${current})` }),
        values.map((v) => h("option", { value: v, text: v })));
      return el;
    };
    const order = sel("queue_order", info.options.queue_order, info.current.queue_order);
    const backfill = sel("backfill", info.options.backfill, info.current.backfill);
    const placement = sel("placement", info.options.placement, info.current.placement);
    const scale = h("input", { id: "w-scale", type: "number", min: "0.1", max: "16", step: "0.1",
      value: "1" });
    const recent = h("input", { id: "w-recent", type: "number", min: "0", max: "2000", step: "1",
      value: "0" });
    const result = h("div", { id: "whatif-result", "aria-live": "polite" });
    const form = h("form", { class: "panel", id: "whatif-form" },
      h("p", { class: "muted", text: "Replays the jobs waiting and running now (and, if you " +
        "ask, the most recent ended ones) through the simulator, under today's policies and " +
        `under yours. At most ${info.limits.jobs} jobs and ${info.limits.nodes} nodes.` }),
      h("div", { class: "row" },
        h("div", {}, h("label", { for: "w-queue_order", text: "Queue order" }), order),
        h("div", {}, h("label", { for: "w-backfill", text: "Backfill" }), backfill),
        h("div", {}, h("label", { for: "w-placement", text: "Placement" }), placement),
        h("div", {}, h("label", { for: "w-scale" }, "Cluster size ",
          h("span", { class: "hint", text: "(× today's nodes)" })), scale),
        h("div", {}, h("label", { for: "w-recent", text: "Recent ended jobs to include" }),
          recent),
        h("div", {}, h("button", { type: "submit", class: "primary", text: "Run what-if" }))));
    root.append(h("h1", { text: "What-if" }), form, result);

    async function poll(id) {
      for (;;) {
        let run;
        try { run = await api("GET", `/v1/portal/whatif/${encodeURIComponent(id)}`); } catch (e) {
          result.replaceChildren(errorBox("The what-if was lost", [e.message]));
          return;
        }
        if (!alive()) return;
        showRun(run);
        if (run.state !== "running") return;
        await new Promise((r) => setTimeout(r, 400));
      }
    }

    function showRun(run) {
      if (run.state === "running") {
        result.replaceChildren(h("p", { class: "notice", text: `Simulating ${run.jobs} job(s)` +
          ` on ${run.nodes} and ${run.alternative_nodes} node(s)…` }));
        return;
      }
      if (run.state === "failed") {
        result.replaceChildren(errorBox("The simulation failed", [run.error]));
        return;
      }
      const a = run.baseline_metrics;
      const b = run.alternative_metrics;
      const lowerBetter = { avg_wait_s: true, p95_wait_s: true, avg_bounded_slowdown: true,
        makespan_s: true, rejected: true, utilization: false, jobs: null };
      const names = { jobs: "Jobs run", rejected: "Rejected", avg_wait_s: "Mean wait",
        p95_wait_s: "95th percentile wait", avg_bounded_slowdown: "Mean bounded slowdown",
        utilization: "Utilisation", makespan_s: "Makespan" };
      const fmt = (k, v) => (k.endsWith("_s") ? fmtDur(v) : k === "utilization" ? pct(v)
        : k === "avg_bounded_slowdown" ? v.toFixed(2) : String(v));
      const rows = Object.keys(names).map((k) => {
        const delta = b[k] - a[k];
        let cls = "";
        if (lowerBetter[k] !== null && Math.abs(delta) > 1e-9) {
          cls = (delta < 0) === lowerBetter[k] ? "better" : "worse";
        }
        const change = a[k] ? `${delta >= 0 ? "+" : ""}${((delta / a[k]) * 100).toFixed(1)}%`
          : delta ? "new" : "0%";
        return h("tr", {}, h("th", { scope: "row", text: names[k] }),
          h("td", { class: "num", text: fmt(k, a[k]) }),
          h("td", { class: "num", text: fmt(k, b[k]) }),
          h("td", { class: `num ${cls}`, text: change }));
      });
      const describe = (c) => `${c.queue_order}, ${c.backfill} backfill, ${c.placement}, ` +
        `× ${c.scale}`;
      result.replaceChildren(h("section", { class: "panel" },
        h("h2", { text: `Run ${run.id}: ${run.jobs} job(s)` }),
        h("p", {}, `Today: ${describe(run.baseline)} (${run.nodes} nodes). What-if: ` +
          `${describe(run.alternative)} (${run.alternative_nodes} nodes).`),
        run.notes.map((n) => h("p", { class: "muted", text: n })),
        h("div", { class: "table-wrap" }, h("table", { id: "whatif-table" },
          h("thead", {}, h("tr", {}, ["Metric", "Today", "What-if", "Change"].map(
            (t) => h("th", { scope: "col", text: t })))),
          h("tbody", {}, rows)))));
    }

    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const size = Number(scale.value);
      const ended = Number(recent.value || "0");
      const wrong = [];
      if (!scale.value.trim() || !(size > 0 && size <= 16)) {
        wrong.push("Cluster size: a number of times today's nodes, more than 0 and at most 16.");
      }
      if (!Number.isInteger(ended) || ended < 0 || ended > info.limits.jobs) {
        wrong.push(`Recent ended jobs to include: a whole number from 0 to ${info.limits.jobs}.`);
      }
      scale.setAttribute("aria-invalid", String(wrong.some((w) => w.startsWith("Cluster"))));
      recent.setAttribute("aria-invalid", String(wrong.some((w) => w.startsWith("Recent"))));
      if (wrong.length) {
        result.replaceChildren(errorBox("The what-if could not start", wrong));
        return;
      }
      const body = { scale: size, include_finished: ended };
      if (order.value) body.queue_order = order.value;
      if (backfill.value) body.backfill = backfill.value;
      if (placement.value) body.placement = placement.value;
      let run;
      try { run = await api("POST", "/v1/portal/whatif", body); } catch (err) {
        result.replaceChildren(errorBox("The what-if could not start", [err.message]));
        return;
      }
      showRun(run);
      poll(run.id);
    });
    if (info.runs.length) showRun(info.runs[0]);
    focusHeading(root);
  }

  // ------------------------------------------------------------------ start

  document.getElementById("logout").addEventListener("click", () => logout());
  window.addEventListener("hashchange", route);
  route();
})();
