// Jobs: the list (refreshed while open) and a job's page with the live convergence plots, its
// status history, cancel and delete; a search job's page follows its whole path instead (solves
// done of all, fold, C; the plot of each fold's current solve), and shows the cross-validation
// table once done.

import { api, streamEvents } from "./api.js";
import { clock, errorBox, facts, fmt, h, statusBadge, table, when } from "./dom.js";
import { ConvergencePlots, SearchPlot } from "./plot.js";
import { isPath, searchProgressRows, selectionSection } from "./selection.js";

const ACTIVE = ["queued", "running"];

function jobsTable(items) {
  return table(items, [
    ["Id", (j) => h("a", { href: `#/jobs/${j.id}` }, j.id)],
    ["Status", (j) => statusBadge(j.status)],
    ["Estimator", (j) => j.estimator],
    ["Dataset", (j) => (j.dataset_id ? h("a", { href: `#/datasets/${j.dataset_id}` }, j.dataset_id) : "–")],
    ["Gap", (j) => fmt(j.progress && j.progress.gap), { num: true }],
    ["Done", (j) => (j.percent === null ? "–" : `${Math.round(j.percent)} %`), { num: true }],
    ["Model", (j) => (j.model_id ? h("a", { href: `#/models/${j.model_id}` }, j.model_id) : "–")],
    ["Created", (j) => when(j.created_at)],
  ], "Jobs, newest first");
}

export async function list(main) {
  main.append(h("h1", {}, "Jobs"));
  const holder = h("div");
  main.append(holder);
  const refresh = async () => {
    const page = await api("/v1/jobs?limit=100");
    holder.replaceChildren(page.items.length ? jobsTable(page.items)
      : h("p", { class: "muted" }, "No jobs yet: open a dataset to train a model."));
  };
  await refresh();
  const timer = setInterval(() => refresh().catch(() => {}), 2000);
  return () => clearInterval(timer);
}

const percentText = (percent) => (percent === null || percent === undefined ? "–" : `${Math.round(percent)} %`);

// name=value pairs, each kept on one line, rather than one JSON object broken mid-word; a
// search chooses C, so the C it was sent with says that it is not the one trained.
function paramsText(params) {
  return Object.entries(params).map(([name, value]) => {
    const text = value !== null && typeof value === "object" ? JSON.stringify(value) : String(value);
    return name === "C" && params.search ? `C=${text} (unused: the search chooses C)` : `${name}=${text}`;
  });
}

function jobFacts(job, last) {
  const p = last || job.progress || {};
  const rows = [
    ["Status", statusBadge(job.status)],
    ["Estimator", job.estimator],
    ["Dataset", job.dataset_id ? h("a", { href: `#/datasets/${job.dataset_id}` }, job.dataset_id) : "–"],
    ["Parameters", h("span", { id: "job-params" }, paramsText(job.params).map((pair) => h("code", {}, pair)))],
  ];
  if (isPath(job)) {
    // every record of the stream says where on the path it is; the gap is the current solve's
    rows.push(...searchProgressRows(job, p),
      ["Iteration of the solve", fmt(p.iteration)],
      ["Gap of the solve", h("span", { id: "job-gap" }, fmt(p.gap))],
      ["Tolerance", fmt(job.tol)],
      ["Elapsed", clock(job.elapsed_s)]);
  } else {
    rows.push(
      ["Iteration", fmt(p.iteration)],
      ["Gap", h("span", { id: "job-gap" }, fmt(p.gap))],
      ["Tolerance", fmt(job.tol)],
      ["Active set", fmt(p.active)],
      ["Elapsed", clock(p.elapsed_s ?? job.elapsed_s)],
      ["Done", percentText(job.percent)],
      ["ETA", clock(job.eta_s)]);
  }
  // the bound in force (the job's time_limit or the server's MAX_JOB_SECONDS), over all attempts
  rows.push(["Time bound", job.time_bound_s == null ? "none" : clock(job.time_bound_s)]);
  for (const key of ["duality_gap", "pg_range", "max_violation", "primal", "dual"]) {
    if (p[key] !== undefined && p[key] !== null) rows.push([key, fmt(p[key])]);
  }
  if (job.stop_reason) rows.push(["Stopped", job.stop_reason]);
  if (job.model_id) rows.push(["Model", h("a", { href: `#/models/${job.model_id}`, id: "job-model" }, job.model_id)]);
  if (job.error) rows.push(["Error", h("span", { class: "error" }, job.error)]);
  return facts(rows);
}

// The job's status changes, oldest first (GET /v1/jobs/{id}/history).
async function showHistory(id, holder) {
  const events = (await api(`/v1/jobs/${encodeURIComponent(id)}/history`)).items;
  holder.replaceChildren(table(events, [
    ["At", (e) => when(e.at)],
    ["Attempt", (e) => fmt(e.attempt), { num: true }],
    ["From", (e) => e.from_status || "–"],
    ["To", (e) => statusBadge(e.to_status)],
    ["By", (e) => e.by || "–"],
    ["Reason", (e) => e.reason || ""],
  ], "Status changes, oldest first"));
}

// The search's outcome, from the model the job produced.
async function showSelection(modelId, holder) {
  const model = await api(`/v1/models/${modelId}`);
  const section = selectionSection(model.selection);
  if (section) holder.replaceChildren(section);
}

export async function show(main, id) {
  const ref = encodeURIComponent(id);  // one path segment, whatever the fragment held
  let job = await api(`/v1/jobs/${ref}`);
  const summary = h("div", { id: "job-summary" });
  const cancel = h("button", { type: "button", class: "danger", id: "job-cancel" }, "Cancel job");
  const remove = h("button", { type: "button", class: "danger", id: "job-delete" }, "Delete job");
  const history = h("div", { id: "job-history" });
  const message = h("div", { role: "status" });
  const plots = h("div", { class: "plots", id: "job-plots" });
  const selection = h("div", { id: "job-selection" });
  main.append(h("h1", {}, `Job ${id}`), summary, h("p", {}, cancel, " ", remove), message, selection,
              h("h2", {}, "Convergence"), plots, h("h2", {}, "History"), history);
  const plot = isPath(job) ? new SearchPlot(plots) : new ConvergencePlots(plots);
  let last = null;
  let shownFor = null;
  let shownStatus = null;
  const render = () => {
    summary.replaceChildren(jobFacts(job, last));
    main.dataset.status = job.status;
    cancel.disabled = !ACTIVE.includes(job.status) || job.cancel_requested;
    remove.disabled = ACTIVE.includes(job.status);
    if (job.status !== shownStatus) {
      shownStatus = job.status;
      showHistory(id, history).catch(() => {});
    }
    if (job.model_id && job.params.search && shownFor !== job.model_id) {
      shownFor = job.model_id;
      showSelection(job.model_id, selection).catch((error) => message.replaceChildren(errorBox(error)));
    }
  };
  render();
  remove.addEventListener("click", async () => {
    if (!confirm(`Delete job ${id}? Its model stays.`)) return;
    try { await api(`/v1/jobs/${ref}`, { method: "DELETE" }); location.hash = "#/jobs"; }
    catch (error) { message.replaceChildren(errorBox(error)); }
  });
  cancel.addEventListener("click", async () => {
    try { job = await api(`/v1/jobs/${ref}/cancel`, { method: "POST" }); render(); }
    catch (error) { message.replaceChildren(errorBox(error)); }
  });
  const abort = new AbortController();
  // the job's other fields (percent, ETA, status) are refreshed now and then beside the stream
  const timer = setInterval(async () => {
    try { job = await api(`/v1/jobs/${ref}`); render(); } catch { /* the stream goes on */ }
    if (!ACTIVE.includes(job.status)) clearInterval(timer);
  }, 1000);
  streamEvents(`/v1/jobs/${ref}/events`, (event) => {
    if (event.event === "progress") {
      last = JSON.parse(event.data);
      plot.add(last);
      render();
    } else if (event.event === "end") {
      const final = JSON.parse(event.data);
      if (final) job = final;
      render();
    }
  }, abort.signal).catch((error) => message.replaceChildren(errorBox(error)));
  return () => { abort.abort(); clearInterval(timer); plot.destroy(); };
}
