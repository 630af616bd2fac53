// Background predictions of a model over a stored dataset (POST /v1/models/{id}/predictions):
// start one, list the model's runs (refreshed while one is active), cancel an active run and
// download a succeeded run's CSV.

import { api, download } from "./api.js";
import { datasetSelect, errorBox, fmt, h, statusBadge, table, when } from "./dom.js";

const ACTIVE = ["queued", "running"];

function runsTable(runs, actions) {
  return table(runs, [
    ["Id", (r) => r.id],
    ["Status", (r) => statusBadge(r.status)],
    ["Dataset", (r) => (r.dataset_id ? h("a", { href: `#/datasets/${r.dataset_id}` }, r.dataset_id) : "–")],
    ["Rows", (r) => fmt(r.n_rows), { num: true }],
    ["Created", (r) => when(r.created_at)],
    ["Finished", (r) => when(r.finished_at)],
    ["", (r) => (r.status === "succeeded" ? actions.download(r) : ACTIVE.includes(r.status) ? actions.cancel(r)
                 : r.error ? h("span", { class: "error" }, r.error) : "")],
  ], "Background predictions, newest first");
}

// The section on the model's page; returns the cleanup that stops its refresh.
export async function predictionRuns(main, model, datasets) {
  const base = `/v1/models/${model.id}/predictions`;
  const holder = h("div", { id: "runs-list" });
  const message = h("div", { role: "status" });
  let timer = null;
  const actions = {
    download: (r) => h("button", { type: "button", class: "secondary", "data-run": r.id,
      "aria-label": `Download the CSV of ${r.id}`,
      onclick: () => download(`${base}/${r.id}`, `${r.id}.csv`).catch((e) => message.replaceChildren(errorBox(e))) },
      "Download CSV"),
    cancel: (r) => h("button", { type: "button", class: "danger", "data-run": r.id,
      "aria-label": `Cancel ${r.id}`,
      onclick: () => api(`${base}/${r.id}/cancel`, { method: "POST" }).then(refresh)
        .catch((e) => message.replaceChildren(errorBox(e))) }, "Cancel"),
  };
  const refresh = async () => {
    const runs = (await api(`${base}?limit=100`)).items;
    holder.replaceChildren(runs.length ? runsTable(runs, actions)
      : h("p", { class: "muted" }, "No background predictions yet."));
    const active = runs.some((r) => ACTIVE.includes(r.status));
    if (active && !timer) timer = setInterval(() => refresh().catch(() => {}), 1000);
    if (!active && timer) { clearInterval(timer); timer = null; }
  };
  const form = h("form", { class: "panel", "aria-labelledby": "runs-title" },
    h("h2", { id: "runs-title" }, "Predict a stored dataset in the background"),
    datasetSelect("runs-dataset", "Dataset", datasets, model.dataset_id),
    h("div", {}, h("button", { type: "submit", id: "runs-submit" }, "Start")), message, holder);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api(base, { method: "POST", json: { dataset_id: form.querySelector("#runs-dataset").value } });
      message.replaceChildren();
      await refresh();
    } catch (error) {
      message.replaceChildren(errorBox(error));
    }
  });
  main.append(form);
  await refresh();
  return () => { if (timer) clearInterval(timer); };
}
