// The dashboard's router: #/datasets, #/datasets/ID, #/jobs, #/jobs/ID, #/models, #/models/ID.

import { forgetKey, storedKey } from "./api.js";
import * as datasets from "./datasets.js";
import { errorBox, h } from "./dom.js";
import * as jobs from "./jobs.js";
import * as models from "./models.js";

const VIEWS = { datasets, jobs, models };

// The id of a page's fragment, decoded. The views put it into API paths encoded (one path
// segment), but "." and ".." stay dot segments there, which fetch resolves to another route:
// a link to #/jobs/.. would have the page read, and its Delete button delete, something else.
function routeId(encoded) {
  const id = decodeURIComponent(encoded);
  if (id === "." || id === "..") throw new Error(`'${id}' is not an id`);
  return id;
}
let cleanup = null;

async function route() {
  const [, section = "datasets", id] = location.hash.replace(/^#/, "").split("/");
  const view = Object.hasOwn(VIEWS, section) ? VIEWS[section] : datasets;
  for (const link of document.querySelectorAll("nav a[data-section]")) {
    if (link.dataset.section === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (cleanup) { cleanup(); cleanup = null; }
  const main = document.getElementById("main");
  main.replaceChildren();
  delete main.dataset.status;
  main.dataset.view = `${section}${id ? "-page" : "-list"}`;
  document.title = `Margin – ${section}${id ? " " + id : ""}`;
  try {
    cleanup = (await (id ? view.show(main, routeId(id)) : view.list(main))) || null;
  } catch (error) {
    main.append(errorBox(error));
  }
  main.dataset.ready = "true";
}

window.addEventListener("hashchange", route);
document.getElementById("forget-key").hidden = !storedKey();
document.getElementById("forget-key").addEventListener("click", () => {
  forgetKey();
  document.getElementById("forget-key").hidden = true;
});
route();
