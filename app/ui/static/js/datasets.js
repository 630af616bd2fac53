// Datasets: the list with an upload form, and a dataset's page (statistics, train form).

import { api, upload } from "./api.js";
import { bars, errorBox, facts, fmt, h, table, when } from "./dom.js";

function labelSummary(d) {
  const labels = d.labels || {};
  if (labels.kind === "classes") return labels.classes.map((c) => `${c.label}: ${c.count}`).join(", ");
  return `real, ${fmt(labels.min)} to ${fmt(labels.max)}`;
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
        });
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

async function trainForm(dataset) {
  const solvers = (await api("/v1/solvers")).items.filter((s) => s.available);
  const estimator = h("select", { id: "train-estimator", name: "estimator" },
    solvers.map((s) => h("option", { value: s.name }, s.name)));
  const params = h("div", { id: "train-params" });
  const showParams = () => {
    const spec = solvers.find((s) => s.name === estimator.value);
    const shown = ["C", "loss", "multi_class", "tol", "max_iter", "epsilon", "time_limit"];
    params.replaceChildren(...spec.params.filter((p) => shown.includes(p.name)).map((p) => {
      const id = `param-${p.name}`;
      const input = p.enum
        ? h("select", { id, name: p.name }, p.enum.filter((v) => v !== null).map((v) =>
            h("option", { value: v, selected: v === p.default }, v)))
        : h("input", { id, name: p.name, type: "number", step: "any",
                       value: p.default ?? "", placeholder: p.default === null ? "none" : null });
      input.dataset.kind = Array.isArray(p.type) ? p.type.join(",") : p.type;
      return h("div", { class: "field" }, h("label", { for: id }, p.name), input);
    }));
  };
  estimator.addEventListener("change", showParams);
  showParams();
  const message = h("div", { role: "status" });
  const form = h("form", { class: "panel", "aria-labelledby": "train-title" },
    h("h2", { id: "train-title" }, "Train a model"),
    h("div", { class: "field" }, h("label", { for: "train-estimator" }, "Estimator"), estimator),
    params, h("div", {}, h("button", { type: "submit", id: "train-submit" }, "Start training")), message);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = {};
    for (const input of params.querySelectorAll("input, select")) {
      if (input.value === "") continue;
      const numeric = input.type === "number";
      values[input.name] = numeric && /integer/.test(input.dataset.kind) && !/number/.test(input.dataset.kind)
        ? parseInt(input.value, 10) : numeric ? parseFloat(input.value) : input.value;
    }
    try {
      const job = await api("/v1/jobs", { method: "POST",
        json: { dataset_id: dataset.id, estimator: estimator.value, params: values } });
      location.hash = `#/jobs/${job.id}`;
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  });
  return form;
}

export async function show(main, id) {
  const [dataset, stats] = await Promise.all([api(`/v1/datasets/${id}`), api(`/v1/datasets/${id}/stats`)]);
  main.append(h("h1", {}, `Dataset ${dataset.name}`), facts([
    ["Id", dataset.id],
    ["Rows", fmt(stats.n_rows)],
    ["Features", fmt(stats.n_features)],
    ["Non-zeros", fmt(stats.nnz)],
    ["Density", `${fmt(100 * stats.density, 3)} %`],
    ["Index base", dataset.zero_based ? "zero-based" : "one-based"],
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
    try { await api(`/v1/datasets/${id}`, { method: "DELETE" }); location.hash = "#/datasets"; }
    catch (error) { message.replaceChildren(errorBox(error)); }
  });
  main.append(h("p", {}, remove), message);
}
