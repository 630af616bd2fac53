// Models: the list, and a model card (parameters, solver outcome, metrics, the search's
// cross-validation table and score-against-C plot when there is one, the largest weights,
// export links, a predict box, evaluation on a stored dataset, the registry and background
// predictions). A model is opened by id, `name@alias` or `name@vN`.

import { api, download } from "./api.js";
import { bars, datasetSelect, errorBox, facts, fmt, h, table, when } from "./dom.js";
import { registryBox, registryTable } from "./registry.js";
import { predictionRuns } from "./runs.js";
import { selectionSection } from "./selection.js";

export async function list(main) {
  main.append(h("h1", {}, "Models"));
  const [page, datasets] = await Promise.all([api("/v1/models?limit=100"), api("/v1/datasets?limit=500")]);
  // a dataset by its name where it is among the newest 500, else by its id
  const names = new Map(datasets.items.map((d) => [d.id, d.name]));
  main.append(page.items.length ? table(page.items, [
    ["Id", (m) => h("a", { href: `#/models/${m.id}` }, m.id)],
    ["Estimator", (m) => m.estimator],
    ["Dataset", (m) => (m.dataset_id ? h("a", { href: `#/datasets/${m.dataset_id}`, title: m.dataset_id },
                                         names.get(m.dataset_id) || m.dataset_id) : "–")],
    ["Status", (m) => m.status],
    ["Gap", (m) => fmt(m.gap), { num: true }],
    ["Train accuracy", (m) => fmt(m.train_accuracy), { num: true }],
    ["Validation accuracy", (m) => fmt(m.validation_accuracy), { num: true }],
    ["Created", (m) => when(m.created_at)],
  ], "Stored models, newest first") : h("p", { class: "muted" }, "No models yet: train one from a dataset's page."));
  const registry = await registryTable();
  if (registry) main.append(registry);
}

// The export route's formats (app/api/models.py): [format, button text, file suffix].
const EXPORTS = [["liblinear", "LIBLINEAR", "model"], ["json", "JSON", "json"], ["onnx", "ONNX", "onnx"],
                 ["skops", "skops (scikit-learn)", "skops"]];

const modelLink = (ref) => h("a", { href: `#/models/${encodeURIComponent(ref)}` }, ref);

// Where the model came from (GET /v1/models/{id}/lineage), and the names it is registered under.
function lineageSection(lineage) {
  const data = (d) => (d ? [h("a", { href: `#/datasets/${d.id}` }, d.name),
    ` (${d.format || "–"}, ${fmt(d.n_rows)} rows, sha256 `, h("code", {}, d.sha256), ")"] : "–");
  return h("section", { "aria-labelledby": "lineage-title", id: "lineage" },
    h("h2", { id: "lineage-title" }, "Lineage"),
    facts([
      ["Training dataset", data(lineage.dataset)],
      ["Validation dataset", data(lineage.validation_dataset)],
      ["Package version", lineage.package_version || "–"],
      ["Commit", lineage.commit ? h("code", {}, lineage.commit) : "–"],
      ["Registered as", h("span", { id: "lineage-registered" }, lineage.registered.length
        ? lineage.registered.flatMap((r, i) => [i ? ", " : "", modelLink(`${r.name}@v${r.version}`),
                                                r.aliases.length ? ` (${r.aliases.join(", ")})` : ""])
        : "–")],
    ]));
}

// A confusion matrix is drawn for at most this many classes: one of the store's MAX_CLASSES
// (1000) is a million cells, a table that hung the tab.
const MATRIX_CLASSES = 50;

function evaluationView(result) {
  if (result.mse !== undefined) {
    return facts([["Rows", fmt(result.n)], ["MSE", h("span", { id: "evaluate-mse" }, fmt(result.mse))],
                  ["R²", fmt(result.r2)], ["Ignored features", fmt(result.ignored_features)]]);
  }
  const rows = [["Rows", fmt(result.n)], ["Accuracy", h("span", { id: "evaluate-accuracy" }, fmt(result.accuracy))]];
  if (result.log_loss !== null && result.log_loss !== undefined) rows.push(["Log loss", fmt(result.log_loss)]);
  if (result.brier_score !== null && result.brier_score !== undefined) rows.push(["Brier score", fmt(result.brier_score)]);
  rows.push(["Ignored features", fmt(result.ignored_features)]);
  if (result.labels.length > MATRIX_CLASSES) {
    return h("div", {}, facts(rows), h("p", { class: "muted", id: "evaluate-matrix-note" },
      `The confusion matrix of ${result.labels.length} classes is not drawn here (over ${MATRIX_CLASSES}); `
      + "the evaluate route (POST /v1/models/{id}/evaluate) returns it in full."));
  }
  const matrix = result.labels.map((label, i) => ({ label, counts: result.confusion_matrix[i] }));
  return h("div", {}, facts(rows), table(matrix, [
    ["True label", (r) => fmt(r.label)],
    ...result.labels.map((label, j) => [fmt(label), (r) => fmt(r.counts[j]), { num: true }]),
  ], "Confusion matrix: rows are the true labels, columns the predicted ones"));
}

function evaluateBox(model, datasets) {
  const output = h("div", { id: "evaluate-output", role: "status" });
  const form = h("form", { class: "panel", "aria-labelledby": "evaluate-title" },
    h("h2", { id: "evaluate-title" }, "Evaluate on a stored dataset"),
    datasetSelect("evaluate-dataset", "Dataset", datasets, model.dataset_id),
    h("div", {}, h("button", { type: "submit", id: "evaluate-submit" }, "Evaluate")), output);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const result = await api(`/v1/models/${model.id}/evaluate`, { method: "POST",
        json: { dataset_id: form.querySelector("#evaluate-dataset").value } });
      output.replaceChildren(evaluationView(result));
    } catch (error) {
      output.replaceChildren(errorBox(error));
    }
  });
  return form;
}

// A model trained on a table (its columns named) is predicted from CSV rows under a header of
// its feature names, read by the rules `margin predict` follows for a table: every feature a
// column, in any order, a column "label" (when not a feature) left out, any other column, an empty
// or non-decimal cell an error naming its line; sent as records. Any model takes LIBSVM lines.
const LIBSVM_HINT = "LIBSVM lines, one instance each (a leading label is ignored)";
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

// The cells of one CSV line; a quoted cell may hold commas, and "" inside quotes is one quote.
function csvCells(line) {
  const cells = [];
  let cell = "", quoted = false, opened = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quoted) {
      if (c === '"' && line[i + 1] === '"') { cell += '"'; i++; }
      else if (c === '"') quoted = false;
      else cell += c;
    } else if (c === '"' && !opened && !cell.trim()) { quoted = opened = true; cell = ""; }
    else if (c === ",") { cells.push(cell); cell = ""; opened = false; }
    else cell += c;
  }
  cells.push(cell);
  return cells;
}

function csvColumns(header, names) {
  const features = new Set(names);
  const twice = header.find((name, k) => header.indexOf(name) !== k);
  if (twice !== undefined) throw new Error(`the header names column '${twice}' twice`);
  const missing = names.filter((name) => !header.includes(name));
  if (missing.length) {
    throw new Error(`the model's feature '${missing[0]}' is not a column `
                    + `(${missing.length} of its ${names.length} features missing)`);
  }
  const extra = header.find((name) => !features.has(name) && name !== "label");
  if (extra !== undefined) throw new Error(`column '${extra}' is not one of the model's features (nor 'label')`);
  return features;
}

function csvRecords(text, names) {
  const lines = text.split(/\r?\n/).map((line, k) => [k + 1, line]).filter(([, line]) => line.trim());
  if (!lines.length) throw new Error("a header line naming the columns comes first");
  const header = csvCells(lines[0][1].replace(/^\ufeff/, "")).map((name) => name.trim());
  const features = csvColumns(header, names);
  if (lines.length === 1) throw new Error("no instances after the header line");
  return lines.slice(1).map(([number, line]) => {
    const cells = csvCells(line);
    if (cells.length !== header.length) {
      throw new Error(`line ${number}: ${cells.length} cells, the header names ${header.length}`);
    }
    const record = {};
    header.forEach((name, j) => {
      if (!features.has(name)) return;
      const cell = cells[j].trim();
      if (!DECIMAL.test(cell)) {
        throw new Error(`line ${number}, column '${name}': ${cell ? `'${cell}' is not a number` : "the cell is empty"}`);
      }
      record[name] = Number(cell);
    });
    return record;
  });
}

const csvName = (name) => (/[",]/.test(name) ? `"${name.replace(/"/g, '""')}"` : name);

function predictRequest(format, text, names) {
  if (format === "csv") return { json: { records: csvRecords(text, names) } };
  return { body: text, headers: { "content-type": "text/plain" } };
}

function predictBox(model) {
  const named = Array.isArray(model.feature_names) && model.feature_names.length > 0;
  const shown = named ? model.feature_names.slice(0, 12).map(csvName) : [];
  const more = named && model.feature_names.length > shown.length ? ",…" : "";
  const csvHint = named ? `${shown.join(",")}${more}\n${shown.map(() => "0").join(",")}${more}` : "";
  const input = h("textarea", { id: "predict-input", name: "instances", spellcheck: "false",
                                placeholder: named ? csvHint : "+1 1:0.5 3:1\n2:0.25 7:1" });
  const format = h("select", { id: "predict-format", name: "format" },
    ...(named ? [h("option", { value: "csv" }, "CSV rows under a header of feature names")] : []),
    h("option", { value: "libsvm" }, LIBSVM_HINT));
  format.addEventListener("change", () => {
    input.placeholder = format.value === "csv" ? csvHint : "+1 1:0.5 3:1\n2:0.25 7:1";
  });
  const output = h("div", { id: "predict-output", role: "status" });
  const probabilities = model.calibration
    ? h("input", { type: "checkbox", id: "predict-probabilities", name: "probabilities", checked: true }) : null;
  const form = h("form", { class: "panel", "aria-labelledby": "predict-title" },
    h("h2", { id: "predict-title" }, "Predict"),
    h("div", { class: "field" }, h("label", { for: "predict-format" }, "Format"), format),
    h("label", { for: "predict-input" }, "Instances"), input, probabilities ? h("div", { class: "field inline" }, probabilities,
      h("label", { for: "predict-probabilities" }, "with probabilities (calibrated model)")) : null,
    h("p", {}, h("button", { type: "submit", id: "predict-submit" }, "Predict")), output);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const query = probabilities && probabilities.checked ? "?probabilities=true" : "";
      const result = await api(`/v1/models/${model.id}/predict${query}`,
                               { method: "POST", ...predictRequest(format.value, input.value, model.feature_names) });
      const rows = (result.labels || result.values).map((v, i) => ({ i, v, d: result.decision_values?.[i],
                                                                     p: result.probabilities?.[i] }));
      output.replaceChildren(table(rows, [
        ["Line", (r) => r.i + 1, { num: true }],
        // class names (text labels) read as text, numbers aligned as numbers
        [result.labels ? "Label" : "Value", (r) => fmt(r.v), { num: !rows.some((r) => typeof r.v === "string") }],
        ...(result.decision_values ? [[decisionTitle(model.classes, result.decision_values[0]),
                                       (r) => r.d.map((x) => fmt(x)).join(", ")]] : []),
        ...(result.probabilities ? [[`Probabilities (${classNames(model.classes)})`,
                                     (r) => r.p.map((x) => fmt(x)).join(", ")]] : []),
      ], "Predictions"));
    } catch (error) {
      output.replaceChildren(errorBox(error));
    }
  });
  return form;
}

// The predict table's headers name the classes its columns follow (the model's order), which
// the numbers alone did not say.
const classNames = (classes) => (classes || []).map((c) => fmt(c)).join(", ");

function decisionTitle(classes, first) {
  if (classes && classes.length === 2 && first && first.length === 1) {
    return `Decision value (> 0: ${fmt(classes[1])})`;
  }
  return classes && first && first.length === classes.length
    ? `Decision values (${classNames(classes)})` : "Decision values";
}

// The relative duality gap of the stored weights, and what it means when it is large: the
// stopping rule can hold on unscaled features while the objective is still far from the optimum.
const LOOSE_CERTIFICATE = 0.01;

function certificate(model) {
  const gap = model.duality_gap;
  if (gap === null || gap === undefined) return "not measured";
  const text = h("span", { id: "model-duality-gap" }, fmt(gap));
  if (!(gap > LOOSE_CERTIFICATE)) return text;
  return h("span", {}, text, h("span", { id: "model-certificate-note", class: "muted" },
    ` (loose: the objective is within ${fmt(100 * gap)}% of the optimum; scale the features ` +
    "or lower tol for a tighter model)"));
}

export async function show(main, id) {
  const ref = encodeURIComponent(id);  // one path segment, whatever the fragment held
  const [model, top, lineage] = await Promise.all([api(`/v1/models/${ref}`),
    api(`/v1/models/${ref}/coefficients?top=20`),
    api(`/v1/models/${ref}/lineage`)]);
  main.append(h("h1", {}, `Model ${id}`), facts([
    ["Id", model.id],
    ["Estimator", model.estimator],
    ["Kind", model.kind],
    ["Classes", model.classes ? model.classes.map((c) => fmt(c)).join(", ") : "–"],
    ["Features", fmt(model.n_features)],
    ["Solver status", h("span", { id: "model-status" }, model.status)],
    ["Final gap", fmt(model.gap)],
    ["Duality gap", certificate(model)],
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
  const search = selectionSection(model.selection);
  if (search) main.append(search);
  main.append(lineageSection(lineage));
  main.append(h("h2", {}, "Largest weights"),
    h("p", { class: "muted" }, `intercept ${top.intercept.map((v) => fmt(v)).join(", ")}`),
    bars(top.items.map((w) => ({ label: `${w.name ?? `feature ${w.feature}`}${w.output === null ? "" : ` (class ${fmt(w.output)})`}`,
                                 value: w.weight })), "Largest weights by magnitude"));
  const message = h("div", { role: "status" });
  const exportButton = ([format, title, suffix]) => h("button", { type: "button", class: "secondary",
    id: `export-${format}`, onclick: () => download(`/v1/models/${ref}/export?format=${format}`, `${id}.${suffix}`)
      .catch((error) => message.replaceChildren(errorBox(error))) }, `Export ${title}`);
  const remove = h("button", { type: "button", class: "danger", id: "model-delete" }, "Delete model");
  remove.addEventListener("click", async () => {
    if (!confirm(`Delete model ${id}?`)) return;
    try { await api(`/v1/models/${ref}`, { method: "DELETE" }); location.hash = "#/models"; }
    catch (error) { message.replaceChildren(errorBox(error)); }
  });
  main.append(h("h2", {}, "Export"),
    h("p", {}, EXPORTS.flatMap((e) => [exportButton(e), " "]), remove),
    message, predictBox(model));
  const datasets = (await api("/v1/datasets?limit=100")).items;
  main.append(evaluateBox(model, datasets), await registryBox(model));
  return predictionRuns(main, model, datasets);
}
