// Models: the list, and a model card (parameters, solver outcome, metrics, the search's
// cross-validation table and score-against-C plot when there is one, the largest weights,
// export links and a predict box).

import { api, download } from "./api.js";
import { bars, errorBox, facts, fmt, h, table, when } from "./dom.js";
import { scorePlot } from "./plot.js";

export async function list(main) {
  main.append(h("h1", {}, "Models"));
  const page = await api("/v1/models?limit=100");
  main.append(page.items.length ? table(page.items, [
    ["Id", (m) => h("a", { href: `#/models/${m.id}` }, m.id)],
    ["Estimator", (m) => m.estimator],
    ["Dataset", (m) => (m.dataset_id ? h("a", { href: `#/datasets/${m.dataset_id}` }, m.dataset_id) : "–")],
    ["Status", (m) => m.status],
    ["Gap", (m) => fmt(m.gap), { num: true }],
    ["Train accuracy", (m) => fmt(m.train_accuracy), { num: true }],
    ["Validation accuracy", (m) => fmt(m.validation_accuracy), { num: true }],
    ["Created", (m) => when(m.created_at)],
  ], "Stored models, newest first") : h("p", { class: "muted" }, "No models yet: train one from a dataset's page."));
}

// The search's table, under whichever name the service gives it (model selection jobs).
function searchOf(model) {
  const search = model.selection || model.search || model.cv || {};
  const rows = model.cv_results || search.cv_results || search.results || search.table;
  if (!Array.isArray(rows) || !rows.length) return null;
  const score = (r) => r.mean_score ?? r.mean_test_score ?? r.score ?? r.mean ?? null;
  return { rows, score, bestC: model.C_ ?? model.best_C ?? search.best_C ?? search.C ?? null };
}

function searchSection(model) {
  const search = searchOf(model);
  if (!search) return null;
  const keys = Object.keys(search.rows[0]).filter((k) => typeof search.rows[0][k] !== "object");
  const section = h("section", { "aria-labelledby": "cv-title" },
    h("h2", { id: "cv-title" }, "Cross-validation"),
    search.bestC !== null ? h("p", {}, `Chosen C: ${fmt(search.bestC)}`) : null,
    table(search.rows, keys.map((k) => [k, (r) => fmt(r[k]), { num: typeof search.rows[0][k] === "number" }])));
  const fig = h("figure", { id: "plot-score", role: "img", "aria-label": "Score against C" },
                h("figcaption", {}, "Mean cross-validation score against C (log scale)"));
  section.append(fig);
  const points = search.rows.filter((r) => r.C > 0 && search.score(r) !== null)
    .sort((a, b) => a.C - b.C);
  requestAnimationFrame(() => scorePlot(fig, points.map((r) => r.C), points.map(search.score)));
  return section;
}

function predictBox(model) {
  const input = h("textarea", { id: "predict-input", name: "instances", spellcheck: "false",
                                placeholder: "+1 1:0.5 3:1\n2:0.25 7:1" });
  const output = h("div", { id: "predict-output", role: "status" });
  const form = h("form", { class: "panel", "aria-labelledby": "predict-title" },
    h("h2", { id: "predict-title" }, "Predict"),
    h("label", { for: "predict-input" }, "LIBSVM lines, one instance each (a leading label is ignored)"),
    input, h("p", {}, h("button", { type: "submit", id: "predict-submit" }, "Predict")), output);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const query = model.calibration ? "?probabilities=true" : "";
      const result = await api(`/v1/models/${model.id}/predict${query}`, { method: "POST", body: input.value,
                                                                  headers: { "content-type": "text/plain" } });
      const rows = (result.labels || result.values).map((v, i) => ({ i, v, d: result.decision_values?.[i],
                                                                     p: result.probabilities?.[i] }));
      output.replaceChildren(table(rows, [
        ["Line", (r) => r.i + 1, { num: true }],
        [result.labels ? "Label" : "Value", (r) => fmt(r.v), { num: true }],
        ...(result.decision_values ? [["Decision values", (r) => r.d.map((x) => fmt(x)).join(", ")]] : []),
        ...(result.probabilities ? [["Probabilities", (r) => r.p.map((x) => fmt(x)).join(", ")]] : []),
      ], "Predictions"));
    } catch (error) {
      output.replaceChildren(errorBox(error));
    }
  });
  return form;
}

export async function show(main, id) {
  const [model, top] = await Promise.all([api(`/v1/models/${id}`), api(`/v1/models/${id}/coefficients?top=20`)]);
  main.append(h("h1", {}, `Model ${id}`), facts([
    ["Estimator", model.estimator],
    ["Kind", model.kind],
    ["Classes", model.classes ? model.classes.map((c) => fmt(c)).join(", ") : "–"],
    ["Features", fmt(model.n_features)],
    ["Solver status", h("span", { id: "model-status" }, model.status)],
    ["Final gap", fmt(model.gap)],
    ["Iterations", fmt(model.n_iter)],
    ["Training time", `${fmt(model.train_time_s)} s`],
    ["Training accuracy", fmt(model.train_accuracy)],
    ["Validation accuracy", fmt(model.validation_accuracy)],
    ["Probabilities", model.calibration ? `calibrated (${model.calibration.method})` : "–"],
    ["Job", model.job_id ? h("a", { href: `#/jobs/${model.job_id}` }, model.job_id) : "–"],
    ["Dataset", model.dataset_id ? h("a", { href: `#/datasets/${model.dataset_id}` }, model.dataset_id) : "–"],
    ["Created", when(model.created_at)],
  ]));
  main.append(h("h2", {}, "Parameters"), facts(Object.entries(model.params).map(([k, v]) => [k, fmt(v)])));
  const search = searchSection(model);
  if (search) main.append(search);
  main.append(h("h2", {}, "Largest weights"),
    h("p", { class: "muted" }, `intercept ${top.intercept.map((v) => fmt(v)).join(", ")}`),
    bars(top.items.map((w) => ({ label: `feature ${w.feature}${w.output === null ? "" : ` (class ${fmt(w.output)})`}`,
                                 value: w.weight })), "Largest weights by magnitude"));
  const message = h("div", { role: "status" });
  const exportButton = (format, name) => h("button", { type: "button", class: "secondary", id: `export-${format}`,
    onclick: () => download(`/v1/models/${id}/export?format=${format}`, name)
      .catch((error) => message.replaceChildren(errorBox(error))) }, `Export ${format === "json" ? "JSON" : "LIBLINEAR"}`);
  const remove = h("button", { type: "button", class: "danger", id: "model-delete" }, "Delete model");
  remove.addEventListener("click", async () => {
    if (!confirm(`Delete model ${id}?`)) return;
    try { await api(`/v1/models/${id}`, { method: "DELETE" }); location.hash = "#/models"; }
    catch (error) { message.replaceChildren(errorBox(error)); }
  });
  main.append(h("h2", {}, "Export"),
    h("p", {}, exportButton("liblinear", `${id}.model`), " ", exportButton("json", `${id}.json`), " ", remove),
    message, predictBox(model));
}
