// Small DOM and formatting helpers.

export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    // through the CSSOM: the Content-Security-Policy (app/ui) refuses style attributes
    else if (key === "style") node.style.cssText = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function fmt(value, digits = 4) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") {
    if (Number.isInteger(value)) return value.toLocaleString("en-US");
    return Math.abs(value) >= 1e-3 && Math.abs(value) < 1e6
      ? value.toPrecision(digits).replace(/\.?0+$/, "")
      : value.toExponential(2);
  }
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function clock(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
  const s = Math.round(seconds);
  const m = Math.floor(s / 60);
  return m >= 60 ? `${Math.floor(m / 60)}:${String(m % 60).padStart(2, "0")}:${String(s % 60).padStart(2, "0")}`
                 : `${m}:${String(s % 60).padStart(2, "0")}`;
}

export function when(iso) { return iso ? iso.replace("T", " ").slice(0, 19) : "–"; }

export function statusBadge(status) { return h("span", { class: `status ${status}` }, status); }

// A table: columns are [title, row => cell, {num: true}?].
export function table(rows, columns, caption) {
  return h("table", {},
    caption ? h("caption", { class: "muted" }, caption) : null,
    h("thead", {}, h("tr", {}, columns.map(([title, , opts]) =>
      h("th", { scope: "col", class: opts && opts.num ? "num" : null }, title)))),
    h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell, opts]) =>
      h("td", { class: opts && opts.num ? "num" : null }, cell(row)))))));
}

export function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

// Horizontal bars with labels and counts (histograms, weights).
export function bars(items, label) {
  const top = Math.max(...items.map((i) => Math.abs(i.value)), 1e-300);
  return h("div", { class: "bars", role: "list", "aria-label": label },
    items.flatMap((item) => [
      h("span", { role: "listitem" }, item.label),
      h("div", { class: `bar${item.value < 0 ? " negative" : ""}`,
                 style: `width: ${(100 * Math.abs(item.value)) / top}%` }),
      h("span", { class: "num" }, fmt(item.value)),
    ]));
}

export function errorBox(error) {
  return h("p", { class: "error", role: "alert" }, error.message || String(error));
}

// A labelled select of stored datasets (evaluation, background predictions); `chosen` first
// selected.
export function datasetSelect(id, label, datasets, chosen) {
  return h("div", { class: "field" }, h("label", { for: id }, label),
    h("select", { id, name: "dataset_id", required: true },
      datasets.map((d) => h("option", { value: d.id, selected: d.id === chosen }, `${d.name} (${d.id})`))));
}
