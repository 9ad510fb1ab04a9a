// The public API as the console calls it: same-origin requests that carry the
// console's header with the login's token, beside the HttpOnly cookie the login
// set. The token lives in this origin's localStorage (its port included): a
// page on another port of the host gets the cookie, never the token.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const TOKEN = "stead-console-token";

export const consoleToken = () => localStorage.getItem(TOKEN) || "";
export const keepConsoleToken = (token) => token ? localStorage.setItem(TOKEN, token) : localStorage.removeItem(TOKEN);
// Before a login there is no token: the header alone says the console sent it.
export const consoleHeaders = () => ({ "x-stead-console": consoleToken() || "1" });

export async function request(method, path, body) {
  const init = { method, credentials: "same-origin", headers: consoleHeaders() };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (response.status === 204) return null;
  const text = await response.text();
  const parsed = text ? JSON.parse(text) : null;
  if (!response.ok) {
    const message = parsed && parsed.error ? parsed.error.message : `HTTP ${response.status}`;
    if (response.status === 401 && !path.startsWith("/console/")) window.dispatchEvent(new CustomEvent("stead-logged-out"));
    throw new ApiError(response.status, message);
  }
  return parsed;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body ?? {});

// Every item of a list, following next_page (at most `pages` pages).
export async function listAll(path, pages = 20) {
  const items = [];
  let page = null;
  for (let i = 0; i < pages; i++) {
    const sep = path.includes("?") ? "&" : "?";
    const body = await get(page ? `${path}${sep}page=${encodeURIComponent(page)}` : path);
    items.push(...body.data);
    page = body.next_page;
    if (!page) break;
  }
  return items;
}

// Reads a session's event stream (server-sent events over fetch, so the
// console's header goes along), calling onEvent for each event; on a dropped
// line it resumes after the last event seen. Returns a function that stops it.
// With no event to resume after, a stream begins at the log's end as it is
// when it opens: what was logged before that (while the page loaded, or while
// the line was down) is read from the list once the stream is open, and the
// stream's copies of those events are skipped.
export function streamEvents(sessionId, afterId, onEvent, onState) {
  const controller = new AbortController();
  let last = afterId;
  let stopped = false;
  let listed = new Set(); // ids of logged events the list gave, which the stream may repeat
  async function once() {
    const query = last ? `?after=${encodeURIComponent(last)}` : "";
    const response = await fetch(`/v1/sessions/${sessionId}/events/stream${query}`, {
      headers: consoleHeaders(), credentials: "same-origin", signal: controller.signal,
    });
    if (!response.ok) throw new ApiError(response.status, `stream: HTTP ${response.status}`);
    if (!last) {
      const logged = await listAll(`/v1/sessions/${sessionId}/events?limit=1000`);
      if (stopped) return;
      listed = new Set();
      for (const event of logged) {
        if (event.processed_at) { last = event.id; listed.add(event.id); }
        onEvent(event);
      }
    }
    onState("live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
        if (!data) continue;
        const event = JSON.parse(data);
        if (listed.has(event.id)) continue; // logged, as the list gave it (a queued echo of it too)
        if (event.id && event.processed_at) last = event.id;
        onEvent(event);
      }
    }
  }
  (async () => {
    let delay = 200;
    while (!stopped) {
      try {
        await once();
        delay = 200;
      } catch (error) {
        if (stopped) return;
        if (error.status === 401 || error.status === 404) {
          onState(`closed: ${error.message}`);
          // The login ended (a logout elsewhere, its 12 hours): to the login, as any other 401.
          if (error.status === 401) window.dispatchEvent(new CustomEvent("stead-logged-out"));
          return;
        }
      }
      if (stopped) return;
      onState("reconnecting");
      await new Promise((r) => setTimeout(r, delay * (0.5 + Math.random())));
      delay = Math.min(delay * 2, 5000);
    }
  })();
  return () => { stopped = true; controller.abort(); };
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function age(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.floor(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}

export function dollars(cost) {
  if (!cost) return "";
  return `$${(Number(cost.amount) / 100).toFixed(2)}`;
}

export function tokens(usage) {
  if (!usage) return 0;
  return (usage.input_tokens || 0) + (usage.output_tokens || 0) +
    (usage.cache_read_input_tokens || 0) +
    ((usage.cache_creation && (usage.cache_creation.ephemeral_5m_input_tokens + usage.cache_creation.ephemeral_1h_input_tokens)) || 0);
}
