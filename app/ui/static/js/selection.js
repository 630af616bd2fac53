// Model selection: the search options of the train form (`params.search`, see
// app/schemas/params.py SearchSpec), a search job's progress, and the cross-validation table
// with the chosen C of the model it produced (`model.selection`).

import { facts, fmt, h, table } from "./dom.js";
import { scorePlot } from "./plot.js";

// Mirrors SearchSpec.scoring (GET /v1/solvers describes `search` as one object, not its fields).
const SCORINGS = ["accuracy", "balanced_accuracy", "f1_macro", "roc_auc"];
// Mirrors app/schemas/params.py GRID_MIN_NUM: a log grid with both bounds needs this many values (the API answers 422
// under it); without bounds (the library's grid) one will do.
const GRID_MIN_NUM = 2;

function field(id, label, input) {
  input.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), input);
}

// The fieldset that asks for a search; `read()` gives params.search, or null when unticked.
export function searchFields() {
  const enabled = h("input", { type: "checkbox", id: "search-enabled", name: "search" });
  const kind = h("select", { name: "search-cs-kind" },
    h("option", { value: "grid" }, "log grid"), h("option", { value: "list" }, "list"));
  const list = h("input", { name: "search-cs", type: "text", placeholder: "0.01, 0.1, 1, 10" });
  const num = h("input", { name: "search-num", type: "number", min: 1, max: 50, step: 1, value: 10 });
  const min = h("input", { name: "search-min", type: "number", step: "any", min: 0, placeholder: "auto" });
  const max = h("input", { name: "search-max", type: "number", step: "any", min: 0, placeholder: "auto" });
  const cv = h("input", { name: "search-cv", type: "number", min: 2, max: 20, step: 1, value: 5 });
  const scoring = h("select", { name: "search-scoring" }, SCORINGS.map((s) => h("option", { value: s }, s)));
  const grid = h("span", {}, field("search-num", "Number of C values", num),
                 field("search-min", "Smallest C (optional)", min), field("search-max", "Largest C (optional)", max));
  const listed = h("span", { hidden: true }, field("search-cs", "C values, comma separated", list));
  const details = h("div", { id: "search-details", hidden: true },
    field("search-cs-kind", "C values from", kind), grid, listed,
    field("search-cv", "Folds", cv), field("search-scoring", "Scoring", scoring));
  const sync = () => {
    details.hidden = !enabled.checked;
    num.min = min.value !== "" && max.value !== "" ? GRID_MIN_NUM : 1;
    grid.hidden = kind.value !== "grid";
    listed.hidden = kind.value !== "list";
  };
  enabled.addEventListener("change", sync);
  kind.addEventListener("change", sync);
  min.addEventListener("input", sync);
  max.addEventListener("input", sync);
  const fieldset = h("fieldset", { id: "search-fields" },
    h("legend", {}, "Model selection"),
    h("div", { class: "field inline" }, enabled,
      h("label", { for: "search-enabled" }, "Choose C by cross-validation (C above is then ignored)")),
    details);
  const read = () => {
    if (!enabled.checked) return null;
    const number = (input) => (input.value === "" ? null : Number(input.value));
    let Cs;
    if (kind.value === "list") {
      Cs = list.value.split(/[\s,;]+/).filter(Boolean).map(Number);
    } else {
      Cs = { num: parseInt(num.value || "10", 10) };
      if (number(min) !== null) Cs.min = number(min);
      if (number(max) !== null) Cs.max = number(max);
    }
    return { Cs, cv: parseInt(cv.value || "5", 10), scoring: scoring.value };
  };
  return { fieldset, read, enabled };
}

// How many C values a search asks for (null for the library's own grid, which may stop early).
function pathLength(search) {
  if (!search) return null;
  if (Array.isArray(search.Cs)) return search.Cs.length;
  return search.Cs && search.Cs.min != null && search.Cs.max != null ? search.Cs.num ?? 10 : null;
}

const outOf = (i, n) => (i === null || i === undefined ? "–" : n ? `${i + 1} of ${n}` : String(i + 1));

// Whether a job solves a path (a search, or probability=true's internal folds at its C).
export function isPath(job) {
  return Boolean(job.params && (job.params.search || job.params.probability));
}

// The share of the path done: the record's (solves done of all), or the job's once it ended.
export function pathPercent(job, p) {
  const shares = [p && p.percent, job.percent].filter((v) => typeof v === "number");
  return shares.length ? Math.max(...shares) : null;
}

// The fact rows of a search job's progress record `p`: how much of the path is done, and where
// on it the solve is (the job's percent alone before the first record). Older records lack the totals: the job's
// parameters give them where they can.
export function searchProgressRows(job, p) {
  const percent = pathPercent(job, p);
  if (!p || !p.stage) return [["Path done", percent === null ? "–" : `${Math.round(percent)} %`]];
  const search = (job.params || {}).search;
  const refit = p.stage === "refit";
  return [
    ["Path done", h("span", {},
      h("progress", { id: "job-path", max: 100, value: percent ?? 0, "aria-label": "Path done" }),
      " ", h("span", { id: "job-path-percent" }, percent === null ? "–" : `${Math.round(percent)} %`))],
    ["Solves", h("span", { id: "job-solves" }, `${fmt(p.solves_done)} of ${fmt(p.solves_total)}`)],
    ["Search stage", h("span", { id: "job-stage" }, refit ? "refit at the chosen C" : "cross-validation path")],
    ["Fold", h("span", { id: "job-fold" }, refit ? "all rows" : outOf(p.fold, p.folds_total ?? (search && search.cv)))],
    ["C index", h("span", { id: "job-c-index" }, refit ? "chosen" : outOf(p.c_index, p.cs_total ?? pathLength(search)))],
    ["C", h("span", { id: "job-C" }, fmt(p.C))],
  ];
}

const list = (values) => values.map((v) => fmt(v)).join(", ");

// The cross-validation table, the chosen C and the score-against-C plot, or null.
export function selectionSection(selection) {
  if (!selection || !Array.isArray(selection.table) || !selection.table.length) return null;
  const rows = [...selection.table].sort((a, b) => a.C - b.C);
  const chosen = (r) => r.C === selection.C;
  const section = h("section", { "aria-labelledby": "cv-title", id: "cv-section" },
    h("h2", { id: "cv-title" }, "Cross-validation"),
    facts([
      ["Chosen C", h("span", { id: "cv-chosen-C" }, fmt(selection.C, 6))],
      [`Best mean ${selection.scoring}`, fmt(selection.best_score)],
      ["Folds", fmt(selection.cv)],
      ...(selection.search_status === "time_limit"
        ? [["Search", "ended at the job's time limit: C chosen among the values every fold finished"]]
        : []),
    ]),
    table(rows, [
      ["C", (r) => h(chosen(r) ? "strong" : "span", {}, fmt(r.C, 6)), { num: true }],
      [`Mean ${selection.scoring}`, (r) => fmt(r.mean_score), { num: true }],
      ["Std", (r) => fmt(r.std_score), { num: true }],
      ["Fold scores", (r) => list(r.fold_scores || [])],
      ["Iterations", (r) => list(r.n_iter || [])],
      ["Seconds", (r) => list(r.fit_time_s || [])],
      ["Solver status", (r) => [...new Set(r.status || [])].join(", ")],
      ["Duality gap", (r) => list(r.duality_gap || [])],
    ], "Cross-validation table: one row per C, the chosen one in bold"),
    h("p", { class: "muted", id: "cv-iterations-note" },
      "Iterations: of each fold's solve, started from the previous C's solution " +
      "(0: that solution already met the tolerance)."));
  const fig = h("figure", { id: "plot-score", role: "img", "aria-label": "Score against C" },
                h("figcaption", {}, `Mean cross-validation ${selection.scoring} against C (log scale)`));
  section.append(fig);
  const points = rows.filter((r) => r.C > 0 && typeof r.mean_score === "number");
  requestAnimationFrame(() => scorePlot(fig, points.map((r) => r.C), points.map((r) => r.mean_score)));
  return section;
}
