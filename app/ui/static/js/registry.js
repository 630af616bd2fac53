// The model registry (/v1/registered-models): the registered names with their versions and
// aliases on the models list, and a form on a model's page that adds the model as a name's next
// version (registering the name first when it is new) and can point an alias at that version.

import { ApiError, api } from "./api.js";
import { errorBox, h, table, when } from "./dom.js";

const path = (name) => `/v1/registered-models/${encodeURIComponent(name)}`;
const modelLink = (ref) => h("a", { href: `#/models/${encodeURIComponent(ref)}` }, ref);

// The registered names, or null when there are none.
export async function registryTable() {
  const names = (await api("/v1/registered-models?limit=100")).items;
  if (!names.length) return null;
  return h("section", { "aria-labelledby": "registry-title" },
    h("h2", { id: "registry-title" }, "Registered names"),
    table(names, [
      ["Name", (r) => r.name],
      ["Latest version", (r) => (r.latest_version ? modelLink(`${r.name}@v${r.latest_version}`) : "–")],
      ["Aliases", (r) => Object.entries(r.aliases).flatMap(([alias, v], i) =>
        [i ? ", " : "", modelLink(`${r.name}@${alias}`), ` (v${v})`])],
      ["Description", (r) => r.description || ""],
      ["Updated", (r) => when(r.updated_at)],
    ], "Registered names, by name"));
}

async function ensureName(name) {
  try {
    await api(path(name));
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 404) throw error;
    await api("/v1/registered-models", { method: "POST", json: { name } });
  }
}

export async function registryBox(model) {
  const names = (await api("/v1/registered-models?limit=100")).items;
  const output = h("div", { id: "registry-output", role: "status" });
  const form = h("form", { class: "panel", "aria-labelledby": "register-title" },
    h("h2", { id: "register-title" }, "Registry"),
    h("div", { class: "field" }, h("label", { for: "register-name" }, "Name (new or registered)"),
      h("input", { id: "register-name", name: "name", type: "text", maxlength: 128, required: true,
                   list: "register-names", pattern: "[^@/]+" })),
    h("datalist", { id: "register-names" }, names.map((r) => h("option", { value: r.name }))),
    h("div", { class: "field" }, h("label", { for: "register-alias" }, "Alias for this version (optional)"),
      h("input", { id: "register-alias", name: "alias", type: "text", maxlength: 64, placeholder: "production" })),
    h("div", {}, h("button", { type: "submit", id: "register-submit" }, "Add as the next version")), output);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const name = form.querySelector("#register-name").value.trim();
    const alias = form.querySelector("#register-alias").value.trim();
    try {
      await ensureName(name);
      const version = await api(`${path(name)}/versions`, { method: "POST", json: { model_id: model.id } });
      if (alias) {
        await api(`${path(name)}/aliases/${encodeURIComponent(alias)}`, { method: "PUT",
                                                                          json: { version: version.version } });
      }
      output.replaceChildren(h("p", {}, `Registered as ${name} version ${version.version}`,
        alias ? [" (", modelLink(`${name}@${alias}`), ")"] : ""));
    } catch (error) {
      output.replaceChildren(errorBox(error));
    }
  });
  return form;
}
