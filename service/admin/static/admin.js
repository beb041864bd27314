// The dashboard's script: refreshes the page's numbers from the JSON admin API without a reload,
// and posts the action forms with fetch (the CSRF token goes in X-CSRF-Token). The page is fully
// rendered by the server, so everything here is an enhancement: with JavaScript off, it reloads
// itself (<meta refresh>) and the forms post as plain HTML forms. A destructive action (a form or
// button with data-confirm) asks with confirm() first; with JavaScript off the server asks instead.
// The header's counts, the queue tables and the workers come from one response (the page's tally).
"use strict";
(function () {
  // The server says how often (never slower than every 5 s; sooner when it samples sooner).
  const REFRESH_MS = Number(document.documentElement.dataset.refreshMs) || 5000;
  const INDEX_REFRESH_MS = 30000;
  const COUNT_FIELDS = ["queued", "deferred", "in_progress", "retrying", "complete", "failed", "retried"];
  const NOTICE_KEY = "agentsearch-admin-notice";
  const JOB_PARAMS = ["status", "kind", "surface", "tenant", "queue", "offset", "limit"];
  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  const csrf = csrfMeta ? csrfMeta.content : "";

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined && value !== false) node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === "") continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const when = (ms) => (ms ? new Date(ms).toISOString().replace("T", " ").slice(0, 19) : "");
  const duration = (ms) => (ms === null || ms === undefined ? "" : ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`);
  const jobHref = (id) => "/admin/jobs/" + encodeURIComponent(id);
  const jobApi = (id, action) => `/admin/api/jobs/${encodeURIComponent(id)}/${action}`;
  const compact = (value) => (typeof value === "string" ? value : JSON.stringify(value));

  async function api(url, options) {
    const opts = Object.assign({ credentials: "same-origin" }, options || {});
    opts.headers = Object.assign({ Accept: "application/json" }, (options || {}).headers || {});
    const response = await fetch(url, opts);
    if (response.status === 401) {
      window.location.assign("/admin/login");
      throw new Error("logged out");
    }
    const body = await response.json().catch(() => null);
    if (!response.ok) throw new Error(body && body.error ? body.error.message : `${response.status} ${response.statusText}`);
    return body;
  }

  function replaceRows(id, rows, emptyText, colspan) {
    const body = document.getElementById(id);
    if (!body) return;
    body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan, class: "empty" }, emptyText))]));
  }

  function countRow(attr, name, counts) {
    const row = el("tr", { [attr]: name }, el("th", {}, name));
    for (const field of COUNT_FIELDS) row.append(el("td", { class: "num", "data-count": field }, String(counts[field])));
    return row;
  }

  function renderOverview(overview) {
    replaceRows("queue-counts", Object.entries(overview.queues).map(([name, c]) => countRow("data-queue", name, c)), "no queues", 8);
    replaceRows("kind-counts", Object.entries(overview.kinds).map(([name, c]) => countRow("data-kind", name, c)), "no jobs yet", 8);
    for (const [name, value] of Object.entries(overview.counts || {})) {
      const count = document.getElementById(`count-${name}`);
      if (count) count.textContent = String(value);
    }
  }

  function renderWorkers(body) {
    replaceRows(
      "workers-body",
      body.workers.map((w) => {
        const row = el(
          "tr",
          { "data-queue": w.queue, "data-status": w.status },
          el("th", {}, w.queue),
          el("td", { class: `status status-${w.status}` }, w.status, w.reason ? el("br") : null, w.reason ? el("small", {}, w.reason) : null),
          el("td", { class: "num" }, w.age_s === null ? "" : `${w.age_s} s`),
          el("td", {}, el("code", {}, w.line || "")),
        );
        return row;
      }),
      "no workers",
      4,
    );
  }

  function actionForm(action, label, cls, question) {
    return el(
      "form",
      { method: "post", action, "data-api": true, "data-confirm": question || null, class: "inline" },
      el("input", { type: "hidden", name: "csrf", value: csrf }),
      el("button", { type: "submit", class: cls }, label),
    );
  }

  function jobActions(job) {
    const actions = [];
    if (job.status === "failed" && !job.retried_as) actions.push(actionForm(jobApi(job.id, "retry"), "Retry", "retry"));
    if (["queued", "deferred", "in_progress"].includes(job.status) && !job.abort_requested)
      actions.push(actionForm(jobApi(job.id, "abort"), "Abort", "abort", `Abort job ${job.id}?`));
    return actions;
  }

  function statusText(job) {
    return job.status + (job.aborted ? " (aborted)" : job.abort_requested ? " (abort requested)" : "");
  }

  function jobRow(job) {
    const result = el("td", { class: "result" });
    if (job.error) result.append(el("span", { class: "error" }, job.error));
    else if (job.result !== null && job.result !== undefined) result.append(compact(job.result));
    if (job.retried_as) result.append(el("br"), el("small", {}, "retried as ", el("a", { href: jobHref(job.retried_as) }, job.retried_as)));
    if (job.retry_of) result.append(el("br"), el("small", {}, "retry of ", el("a", { href: jobHref(job.retry_of) }, job.retry_of)));
    const target = el("td", {}, job.target || "");
    if (job.tenants.length) target.append(el("br"), el("small", {}, job.tenants.join(", ")));
    return el(
      "tr",
      { "data-job-id": job.id, "data-status": job.status },
      el("td", { class: "id" }, el("a", { href: jobHref(job.id) }, job.id)),
      el("td", {}, job.function),
      target,
      el("td", {}, job.queue),
      el("td", { class: `status status-${job.status}` }, statusText(job)),
      el("td", { class: "num" }, String(job.tries)),
      el("td", {}, when(job.enqueued_ms)),
      el("td", {}, when(job.started_ms)),
      el("td", {}, when(job.finished_ms)),
      el("td", { class: "num" }, duration(job.duration_ms)),
      result,
      el("td", { class: "actions" }, ...jobActions(job)),
    );
  }

  function pageLink(id, offset, show) {
    const link = document.getElementById(id);
    if (!link) return;
    const params = jobParams();
    params.set("offset", String(Math.max(0, offset)));
    link.href = `/admin?${params}#jobs`;
    link.hidden = !show;
  }

  function renderJobs(page) {
    replaceRows("jobs-body", page.jobs.map(jobRow), "no jobs match", 12);
    const q = page.query;
    const first = page.jobs.length ? q.offset + 1 : 0;
    const meta = document.getElementById("jobs-meta");
    if (meta) {
      const total = page.total === null ? "filtered" : `${page.total} jobs`;
      const cut = page.truncated ? `; stopped after reading ${page.scanned} jobs, narrow the filters` : "";
      meta.textContent = `${total}${cut} · showing ${first}–${q.offset + page.jobs.length}, newest first`;
    }
    pageLink("jobs-newer", q.offset - q.limit, q.offset > 0);
    pageLink("jobs-older", q.offset + q.limit, page.has_more);
  }

  function renderIndex(state) {
    document.getElementById("store-backend").textContent = state.store;
    document.getElementById("model-name").textContent = state.model || "none (lexical only)";
    const rows = [];
    for (const s of state.surfaces) {
      const cells = (x) => [el("td", { class: "num" }, String(x.records)), el("td", { class: "num" }, String(x.embedded)), el("td", { class: "num" }, String(x.pending)), el("td", {}, when(x.last_warm_ms))];
      rows.push(el("tr", { class: "surface-total", "data-surface": s.surface, "data-tenant": "" }, el("th", {}, s.surface), el("td", {}, el("i", {}, "all")), ...cells(s)));
      for (const t of s.tenants) rows.push(el("tr", { "data-surface": s.surface, "data-tenant": t.tenant }, el("td"), el("td", {}, t.tenant), ...cells(t)));
    }
    replaceRows("index-body", rows, "no surfaces", 6);
    const problems = (state.workspaces || []).map((w) =>
      el("tr", { "data-workspace": w.id }, el("td", {}, w.id), el("td", {}, w.tenant), el("td", {}, w.root), el("td", { class: `state-${w.state}` }, w.state), el("td", {}, w.problem)));
    replaceRows("workspace-problems", problems, "none: every workspace's root and cache are there", 5);
    const open = (state.open_workspaces || []).map((w) =>
      el("tr", { "data-workspace": w.id }, el("td", {}, w.id), el("td", {}, w.tenant), el("td", {}, w.root), el("td", {}, when(w.last_used_ms)), el("td", { title: w.freshness_reason || "" }, w.freshness)));
    replaceRows("workspace-open", open, "none: a workspace opens when searched and closes when left idle", 5);
    const warming = (state.warming_workspaces || []).map((w) =>
      el("tr", { "data-workspace": w.id }, el("td", {}, w.id), el("td", {}, w.tenant), el("td", {}, w.root),
        el("td", { class: "num", title: `${w.embedded} of ${w.total} chunks` }, `${(w.share * 100).toFixed(1)}%`),
        el("td", { class: "num" }, w.rate_per_s === null ? "measuring" : `${w.rate_per_s} chunks/s`),
        el("td", {}, w.expected_finish || ""), el("td", {}, w.note || "")));
    replaceRows("workspace-warming", warming, "none: no workspace is being embedded in the background", 7);
  }

  function jobParams() {
    const params = new URLSearchParams();
    const current = new URLSearchParams(window.location.search);
    for (const name of JOB_PARAMS) if (current.get(name)) params.set(name, current.get(name));
    return params;
  }

  function setState(text, failed) {
    const state = document.getElementById("refresh-state");
    if (state) {
      state.textContent = text;
      state.classList.toggle("error", Boolean(failed));
    }
  }

  let noticeTimer = null;
  function notice(text, failed) {
    const box = document.getElementById("notice");
    if (!box) return;
    box.textContent = text;
    box.append(el("button", { type: "button", class: "close", "aria-label": "dismiss" }, "×"));
    box.hidden = false;
    box.classList.toggle("error", Boolean(failed));
    clearTimeout(noticeTimer);
    if (!failed) noticeTimer = setTimeout(() => (box.hidden = true), 10000);
  }

  async function refreshChart() {
    const response = await fetch("/admin/chart.svg", { credentials: "same-origin" });
    if (response.ok) document.getElementById("chart").innerHTML = await response.text();
  }

  let refreshing = false;
  async function refresh() {
    if (refreshing) return;
    refreshing = true;
    try {
      const [overview, workers, jobs] = await Promise.all([api("/admin/api/overview"), api("/admin/api/workers"), api(`/admin/api/jobs?${jobParams()}`)]);
      renderOverview(overview);
      renderWorkers(workers);
      renderJobs(jobs);
      await refreshChart();
      document.getElementById("updated").textContent = `${when(overview.at_ms)} UTC`;
      setState(`Refreshes itself every ${REFRESH_MS / 1000} s.`, false);
    } catch (error) {
      setState(`Refresh failed (${error.message}); retrying.`, true);
    } finally {
      refreshing = false;
    }
  }

  async function refreshIndex() {
    try {
      renderIndex(await api("/admin/api/index"));
    } catch (error) {
      setState(`Index state refresh failed (${error.message}).`, true);
    }
  }

  async function refreshJob() {
    const detail = document.getElementById("job-detail");
    if (!detail) return;
    const id = decodeURIComponent(window.location.pathname.slice("/admin/jobs/".length));
    try {
      const job = await api(`/admin/api/jobs/${encodeURIComponent(id)}`);
      if (job.status !== detail.dataset.status || (job.retried_as && !document.getElementById("retried-as"))) window.location.reload();
    } catch (error) {
      notice(error.message, true);
    }
  }

  function outcomeText(body) {
    if (body.action) {
      const refused = Object.entries(body.refused || {});
      let text = `${body.action}: ${body.done.length} job${body.done.length === 1 ? "" : "s"}`;
      if (refused.length) text += `; ${refused.length} refused (first: ${refused[0][0]}: ${refused[0][1]})`;
      if (body.left) text += `; ${body.left} more not done in this press, press again`;
      return text + ".";
    }
    if (body.retry_of) return `Job ${body.retry_of} retried as ${body.job.id}.`;
    if (body.abort_requested) return `Abort of job ${body.id} requested.`;
    return `Enqueued ${body.function} as job ${body.id}.`;
  }

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (form.id === "job-filters") {
      event.preventDefault();
      const params = new URLSearchParams();
      for (const [name, value] of new FormData(form)) if (value) params.set(name, String(value));
      window.history.replaceState(null, "", `/admin?${params}#jobs`);
      refresh();
      return;
    }
    const submitter = event.submitter;
    const question = (submitter && submitter.dataset.confirm) || form.dataset.confirm;
    if (question && !window.confirm(question)) {
      event.preventDefault();
      return;
    }
    if (!form.hasAttribute("data-api")) return;
    event.preventDefault();
    const action = (submitter && submitter.getAttribute("formaction")) || form.action;
    const onTab = Boolean(document.getElementById("tab-rows"));
    try {
      const body = await api(action, { method: "POST", headers: { "X-CSRF-Token": csrf }, body: new FormData(form) });
      notice(outcomeText(body), false);
      if (body.retry_of && document.getElementById("job-detail")) {
        window.location.assign(jobHref(body.job.id));
        return;
      }
      if (onTab) {
        // A tab lists what its counts count: show the new list (and counts) with the notice kept.
        sessionStorage.setItem(NOTICE_KEY, outcomeText(body));
        window.location.reload();
        return;
      }
    } catch (error) {
      notice(error.message, true);
    }
    if (document.getElementById("job-detail")) refreshJob();
    else if (!onTab) refresh();
  });

  document.addEventListener("click", (event) => {
    if (event.target.closest("#notice .close")) document.getElementById("notice").hidden = true;
    const all = event.target.closest("#pick-all");
    if (all) for (const box of document.querySelectorAll('#tab-rows input[type="checkbox"]')) box.checked = all.checked;
  });

  const carried = sessionStorage.getItem(NOTICE_KEY);
  const served = document.getElementById("notice");
  if (carried) {
    sessionStorage.removeItem(NOTICE_KEY);
    notice(carried, false);
  } else if (served && !served.hidden) {
    notice(served.textContent, served.classList.contains("error"));  // adds the close button
  }
  const pickAll = document.getElementById("pick-all");
  if (pickAll) pickAll.hidden = false;

  document.addEventListener("click", (event) => {
    const link = event.target.closest("#jobs-newer, #jobs-older");
    if (!link) return;
    event.preventDefault();
    window.history.replaceState(null, "", link.getAttribute("href"));
    refresh();
  });

  if (document.getElementById("jobs-body")) {
    setInterval(refresh, REFRESH_MS);
    setInterval(refreshIndex, INDEX_REFRESH_MS);
  } else if (document.getElementById("job-detail")) {
    setInterval(refreshJob, REFRESH_MS);
  }
})();
