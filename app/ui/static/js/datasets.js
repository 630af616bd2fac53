// Datasets: the list with an upload form, and a dataset's page (statistics, train form).

import { api, upload } from "./api.js";
import { bars, errorBox, facts, fmt, h, table, when } from "./dom.js";
import { searchFields } from "./selection.js";

// A list row names its first classes only: a text label column may hold up to the store's
// MAX_CLASSES (1000) names, which made a cell of every class in a row of the list.
const LISTED_CLASSES = 10;

function labelSummary(d) {
  const labels = d.labels || {};
  if (labels.kind === "classes") {
    const shown = labels.classes.slice(0, LISTED_CLASSES).map((c) => `${c.label}: ${c.count}`).join(", ");
    const more = labels.classes.length - LISTED_CLASSES;
    return more > 0 ? `${shown}, … (${labels.classes.length} classes)` : shown;
  }
  return `real, ${fmt(labels.min)} to ${fmt(labels.max)}`;
}

// The upload route's `format` values (app/api/datasets.py).
const FORMATS = ["libsvm", "csv", "tsv", "parquet", "npz"];

// The parse options of tables (CSV, TSV, Parquet): the label column and empty cells.
function tableOptions() {
  return h("fieldset", { id: "upload-table-options" },
    h("legend", {}, "CSV, TSV and Parquet"),
    h("div", { class: "field" },
      h("label", { for: "upload-label-column" }, "Label column (default: label, else the first column)"),
      h("input", { id: "upload-label-column", name: "label_column", type: "text", maxlength: 255 })),
    h("div", { class: "field" },
      h("label", { for: "upload-empty-cells" }, "Empty cells"),
      h("select", { id: "upload-empty-cells", name: "empty_cells" },
        h("option", { value: "" }, "are an error"), h("option", { value: "zero" }, "read as 0"))));
}

function uploadOptions(form) {
  return {
    format: form.querySelector("#upload-format").value,
    label_column: form.querySelector("#upload-label-column").value.trim(),
    empty_cells: form.querySelector("#upload-empty-cells").value,
  };
}

function uploadForm() {
  const status = h("span", { id: "upload-status", role: "status" });
  const bar = h("progress", { id: "upload-progress", max: 100, value: 0, "aria-label": "Upload progress" });
  const form = h("form", { class: "panel", "aria-labelledby": "upload-title" },
    h("h2", { id: "upload-title" }, "Upload a dataset"),
    h("div", { class: "field" },
      h("label", { for: "upload-file" }, "LIBSVM, CSV or TSV (with a header row), Parquet or npz file; gzip, bzip2 or xz compressed is fine"),
      h("input", { id: "upload-file", name: "file", type: "file", required: true })),
    h("div", { class: "field" },
      h("label", { for: "upload-name" }, "Name (optional)"),
      h("input", { id: "upload-name", name: "name", type: "text", maxlength: 255 })),
    h("div", { class: "field" },
      h("label", { for: "upload-format" }, "Format"),
      h("select", { id: "upload-format", name: "format" },
        h("option", { value: "" }, "from the file's name or first bytes"),
        FORMATS.map((f) => h("option", { value: f }, f)))),
    tableOptions(),
    h("div", {}, h("button", { type: "submit", id: "upload-submit" }, "Upload"), " ", bar, " ", status));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const file = form.querySelector("#upload-file").files[0];
    if (!file) return;
    form.querySelector("#upload-submit").disabled = true;
    status.textContent = "uploading…";
    try {
      const dataset = await upload(file, form.querySelector("#upload-name").value.trim(),
        (sent, total) => {
          bar.value = total ? (100 * sent) / total : 0;
          if (sent >= total) status.textContent = "parsing…";
        }, uploadOptions(form));
      bar.value = 100;
      status.textContent = `stored as ${dataset.id}`;
      location.hash = `#/datasets/${dataset.id}`;
    } catch (error) {
      status.textContent = "";
      status.append(errorBox(error));
    } finally {
      form.querySelector("#upload-submit").disabled = false;
    }
  });
  return form;
}

export async function list(main) {
  main.append(h("h1", {}, "Datasets"), uploadForm());
  const page = await api("/v1/datasets?limit=100");
  main.append(page.items.length ? table(page.items, [
    ["Name", (d) => h("a", { href: `#/datasets/${d.id}` }, d.name)],
    ["Id", (d) => d.id],
    ["Rows", (d) => fmt(d.n_rows), { num: true }],
    ["Features", (d) => fmt(d.n_features), { num: true }],
    ["Non-zeros", (d) => fmt(d.nnz), { num: true }],
    ["Labels", labelSummary],
    ["Created", (d) => when(d.created_at)],
  ], "Stored datasets, newest first") : h("p", { class: "muted" }, "No datasets yet: upload one above."));
}

// The estimator's parameters the form asks for (the others keep their defaults).
const SHOWN = ["C", "loss", "multi_class", "tol", "max_iter", "epsilon", "time_limit", "probability",
               "calibration"];

function paramInput(p) {
  const id = `param-${p.name}`;
  let input;
  if (p.type === "boolean") {
    input = h("input", { id, name: p.name, type: "checkbox", checked: p.default === true });
    input.dataset.kind = "boolean";
    return h("div", { class: "field inline" }, input, h("label", { for: id }, p.name));
  }
  input = p.enum
    ? h("select", { id, name: p.name }, p.enum.filter((v) => v !== null).map((v) =>
        h("option", { value: v, selected: v === p.default }, v)))
    : h("input", { id, name: p.name, type: "number", step: "any",
                   value: p.default ?? "", placeholder: p.default === null ? "none" : null });
  input.dataset.kind = Array.isArray(p.type) ? p.type.join(",") : p.type;
  return h("div", { class: "field" }, h("label", { for: id }, p.name), input);
}

function paramValues(params) {
  const values = {};
  for (const input of params.querySelectorAll("input, select")) {
    if (input.dataset.kind === "boolean") { values[input.name] = input.checked; continue; }
    if (input.value === "") continue;
    const numeric = input.type === "number";
    values[input.name] = numeric && /integer/.test(input.dataset.kind) && !/number/.test(input.dataset.kind)
      ? parseInt(input.value, 10) : numeric ? parseFloat(input.value) : input.value;
  }
  return values;
}

function validationSelect(datasets, own) {
  return h("div", { class: "field" },
    h("label", { for: "train-validation" }, "Validation dataset (optional)"),
    h("select", { id: "train-validation", name: "validation_dataset_id" },
      h("option", { value: "" }, "none"),
      datasets.filter((d) => d.id !== own).map((d) => h("option", { value: d.id }, `${d.name} (${d.id})`))));
}

async function trainForm(dataset) {
  const [solverList, datasetPage] = await Promise.all([api("/v1/solvers"), api("/v1/datasets?limit=100")]);
  const solvers = solverList.items.filter((s) => s.available);
  const estimator = h("select", { id: "train-estimator", name: "estimator" },
    solvers.map((s) => h("option", { value: s.name }, s.name)));
  const params = h("div", { id: "train-params" });
  const search = searchFields();
  const validation = validationSelect(datasetPage.items, dataset.id);
  const showParams = () => {
    const spec = solvers.find((s) => s.name === estimator.value);
    params.replaceChildren(...spec.params.filter((p) => SHOWN.includes(p.name)).map(paramInput));
    search.fieldset.hidden = !spec.params.some((p) => p.name === "search");
    validation.hidden = spec.kind !== "classifier";  // only a classifier's accuracy is scored
    ignoreC();
  };
  const ignoreC = () => {  // a search chooses C itself
    const C = params.querySelector("#param-C");
    if (C) C.disabled = search.enabled.checked && !search.fieldset.hidden;
  };
  estimator.addEventListener("change", showParams);
  search.enabled.addEventListener("change", ignoreC);
  showParams();
  const message = h("div", { role: "status" });
  const form = h("form", { class: "panel", "aria-labelledby": "train-title" },
    h("h2", { id: "train-title" }, "Train a model"),
    h("div", { class: "field" }, h("label", { for: "train-estimator" }, "Estimator"), estimator),
    validation, params, search.fieldset,
    h("div", {}, h("button", { type: "submit", id: "train-submit" }, "Start training")), message);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = paramValues(params);
    const chosen = search.fieldset.hidden ? null : search.read();
    if (chosen) { values.search = chosen; delete values.C; }
    const body = { dataset_id: dataset.id, estimator: estimator.value, params: values };
    const other = validation.querySelector("select").value;
    if (other && !validation.hidden) body.validation_dataset_id = other;
    try {
      const job = await api("/v1/jobs", { method: "POST", json: body });
      location.hash = `#/jobs/${job.id}`;
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  });
  return form;
}

export async function show(main, id) {
  const ref = encodeURIComponent(id);  // one path segment, whatever the fragment held
  const [dataset, stats] = await Promise.all([api(`/v1/datasets/${ref}`), api(`/v1/datasets/${ref}/stats`)]);
  main.append(h("h1", {}, `Dataset ${dataset.name}`), facts([
    ["Id", dataset.id],
    ["Rows", fmt(stats.n_rows)],
    ["Features", fmt(stats.n_features)],
    ["Non-zeros", fmt(stats.nnz)],
    ["Density", `${fmt(100 * stats.density, 3)} %`],
    ["Format", h("span", { id: "dataset-format" }, dataset.format || "–")],
    ...(dataset.feature_names ? [["Feature columns", h("span", { id: "dataset-columns" },
      dataset.feature_names.slice(0, 50).join(", ") + (dataset.feature_names.length > 50 ? ", …" : ""))]]
      : [["Index base", dataset.zero_based ? "zero-based" : "one-based"]]),
    ["Size", `${fmt(dataset.size_bytes)} bytes`],
    ["Created", when(dataset.created_at)],
  ]));
  main.append(h("h2", { id: "labels-title" }, "Labels"));
  if (stats.classes) {
    main.append(bars(stats.classes.map((c) => ({ label: String(c.label), value: c.count })), "Label histogram"));
  } else if (stats.target) {
    main.append(bars(stats.target.counts.map((c, i) => ({
      label: `${fmt(stats.target.edges[i])} – ${fmt(stats.target.edges[i + 1])}`, value: c })), "Target histogram"));
  }
  const r = stats.row_nnz;
  main.append(h("h2", {}, "Non-zeros per row"),
    h("p", { class: "muted" }, `min ${r.min}, median ${fmt(r.median)}, mean ${fmt(r.mean)}, max ${r.max}`),
    bars(r.counts.map((c, i) => ({ label: r.edges[i + 1] - r.edges[i] === 1 ? fmt(r.edges[i])
                                   : `${fmt(r.edges[i])} – ${fmt(r.edges[i + 1])}`, value: c })),
         "Rows per number of non-zeros"));
  main.append(await trainForm(dataset));
  const remove = h("button", { type: "button", class: "danger", id: "dataset-delete" }, "Delete dataset");
  const message = h("div", { role: "status" });
  remove.addEventListener("click", async () => {
    if (!confirm(`Delete dataset ${dataset.name}?`)) return;
    try { await api(`/v1/datasets/${ref}`, { method: "DELETE" }); location.hash = "#/datasets"; }
    catch (error) { message.replaceChildren(errorBox(error)); }
  });
  main.append(h("p", {}, remove), message);
}
