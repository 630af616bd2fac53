// Calls to the /v1 API from the browser: the API key (asked once, kept in session storage),
// problem documents as ApiError, Server-Sent Events read through fetch (so that the key can be
// sent), and uploads with progress.

const KEY = "margin.apiKey";

export class ApiError extends Error {
  constructor(status, problem) {
    super(`${status} ${problem.title || "Error"}${problem.detail ? ": " + problem.detail : ""}`);
    this.status = status;
    this.problem = problem;
  }
}

export function storedKey() { return sessionStorage.getItem(KEY); }
export function forgetKey() { sessionStorage.removeItem(KEY); }

function authHeaders(extra = {}) {
  const key = storedKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : { ...extra };
}

async function problemOf(response) {
  try { return await response.json(); } catch { return { title: response.statusText }; }
}

// Ask for a key in the dialog; resolves once one is stored, rejects on cancel.
export function askKey(reason) {
  const dialog = document.getElementById("key-dialog");
  const form = document.getElementById("key-form");
  const input = document.getElementById("api-key");
  document.getElementById("key-reason").textContent = reason || "This service needs an API key.";
  input.value = "";
  return new Promise((resolve, reject) => {
    const done = (ok) => {
      form.removeEventListener("submit", onSubmit);
      document.getElementById("key-cancel").removeEventListener("click", onCancel);
      dialog.removeEventListener("cancel", onCancel);
      if (dialog.open) dialog.close();
      ok ? resolve() : reject(new ApiError(401, { title: "Unauthorized", detail: "no API key" }));
    };
    const onSubmit = (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY, input.value.trim());
      document.getElementById("forget-key").hidden = false;
      done(true);
    };
    const onCancel = (event) => { event.preventDefault(); done(false); };
    form.addEventListener("submit", onSubmit);
    document.getElementById("key-cancel").addEventListener("click", onCancel);
    dialog.addEventListener("cancel", onCancel);
    dialog.showModal();
    input.focus();
  });
}

// A request to the API; JSON in (`json`) and out. 401 asks for a key and tries again.
export async function api(path, { method = "GET", json, body, headers = {}, raw = false } = {}) {
  for (;;) {
    const sent = authHeaders(headers);
    if (json !== undefined) { sent["content-type"] = "application/json"; body = JSON.stringify(json); }
    const response = await fetch(path, { method, body, headers: sent });
    if (response.status === 401) {
      const problem = await problemOf(response);
      await askKey(storedKey() ? `That key was refused: ${problem.detail}` : problem.detail);
      continue;
    }
    if (!response.ok) throw new ApiError(response.status, await problemOf(response));
    if (raw) return response;
    if (response.status === 204) return null;
    const type = response.headers.get("content-type") || "";
    return type.includes("json") ? response.json() : response.text();
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Read a Server-Sent Events stream; `onEvent({event, id, data})` for each event. Reconnects
// with Last-Event-ID where a stream breaks off; returns after the `end` event or on abort.
export async function streamEvents(path, onEvent, signal) {
  let lastId = null;
  while (!signal.aborted) {
    let response;
    try {
      const headers = authHeaders({ Accept: "text/event-stream" });
      if (lastId) headers["Last-Event-ID"] = lastId;
      response = await fetch(path, { headers, signal });
    } catch (error) {
      if (signal.aborted) return;
      await sleep(1000);
      continue;
    }
    if (response.status === 401) { await askKey((await problemOf(response)).detail); continue; }
    // the API process serves as many streams as it may (503), or as many of this tenant (429)
    if (response.status === 503 || response.status === 429) {
      await sleep(1000 * retryAfter(response));
      continue;
    }
    if (!response.ok) throw new ApiError(response.status, await problemOf(response));
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer = (buffer + value).replace(/\r\n/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = parseEvent(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
          if (!event) continue;
          if (event.id) lastId = event.id;
          onEvent(event);
          if (event.event === "end") return;
        }
      }
    } catch (error) {
      if (signal.aborted) return;
    }
    await sleep(500);
  }
}

// Seconds a 503 asks the client to wait (Retry-After), between 1 and 30.
function retryAfter(response) {
  const seconds = Number(response.headers.get("Retry-After"));
  return Number.isFinite(seconds) ? Math.min(30, Math.max(1, seconds)) : 5;
}

function parseEvent(block) {
  const event = { event: "message", id: null, data: [] };
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event.event = value;
    else if (field === "id") event.id = value;
    else if (field === "data") event.data.push(value);
  }
  if (!event.data.length) return null;
  event.data = event.data.join("\n");
  return event;
}

// Upload a file as the raw request body; `onProgress(sent, total)` as it goes. `options` are
// the parse options the upload route takes in its query string (format, label_column,
// empty_cells); empty ones are left out, so that the service's defaults apply.
export function upload(file, name, onProgress, options = {}) {
  const query = new URLSearchParams({ name: name || file.name, filename: file.name });
  for (const [key, value] of Object.entries(options)) if (value) query.set(key, value);
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", `/v1/datasets?${query}`);
    for (const [k, v] of Object.entries(authHeaders({ "content-type": "application/octet-stream" }))) {
      xhr.setRequestHeader(k, v);
    }
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : file.size);
    xhr.onerror = () => reject(new ApiError(0, { title: "Network error", detail: "the upload failed" }));
    xhr.onload = () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch { body = { title: xhr.statusText }; }
      if (xhr.status === 401) {
        askKey(body.detail).then(() => upload(file, name, onProgress, options)).then(resolve, reject);
      } else if (xhr.status >= 400) reject(new ApiError(xhr.status, body));
      else resolve(body);
    };
    xhr.send(file);
  });
}

// Download an API resource as a file (through fetch, so that the key is sent).
export async function download(path, filename) {
  const response = await api(path, { raw: true });
  const url = URL.createObjectURL(await response.blob());
  const link = document.createElement("a");
  link.href = url;
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
