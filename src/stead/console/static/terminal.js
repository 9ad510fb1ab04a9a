// A terminal into a session's sandbox: xterm.js over the PTY WebSocket
// (DESIGN §5), with the rules of stead.client.Terminal: when an attached line
// drops abnormally, redial with exponential backoff and jitter (a dial that
// fails backs off further), reattaching to the same terminal id from the
// offset of the last byte shown, so no byte shows twice; a refusal (4400-4499
// but 4408, too slow) ends it at once; more than FLAP_LIMIT drops within
// FLAP_WINDOW_MS end it too. The terminal id is kept for the browser tab, so a
// reload reattaches and replays the scrollback.
import { consoleToken, el, get } from "./api.js";

const STDIN = 0, STDOUT = 1, STDERR = 2, EXIT = 3;
const TOO_SLOW = 4408;
const BACKOFF_INITIAL_MS = 200, BACKOFF_MAX_MS = 5000;
const FLAP_LIMIT = 3, FLAP_WINDOW_MS = 60000;
const KEEPALIVE_MS = 30000;
const refused = (code) => code >= 4400 && code < 4500 && code !== TOO_SLOW;

export async function terminalPage(main, sessionId) {
  const session = await get(`/v1/sessions/${sessionId}`);
  const state = el("span", { class: "muted", id: "terminal-state", text: "connecting…" });
  const box = el("div", { class: "terminal", id: "terminal" });
  const fresh = el("button", { type: "button", text: "New shell" });
  main.replaceChildren(
    el("h1", {}, "Terminal · ", el("a", { href: `#/sessions/${sessionId}`, text: session.title || sessionId })),
    el("div", { class: "toolbar" }, state, fresh), box);

  const term = new window.Terminal({ convertEol: false, cursorBlink: true, fontSize: 13, scrollback: 5000 });
  const fit = new window.FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  const storageKey = `stead-terminal-${sessionId}`;
  const encoder = new TextEncoder();
  let socket = null, offset = 0, closed = false, redials = [], keepalive = null, retry = null;
  let terminalId = sessionStorage.getItem(storageKey);

  function address() {
    const query = new URLSearchParams({ offset: String(offset), rows: String(term.rows), cols: String(term.cols) });
    if (terminalId) query.set("id", terminalId);
    query.set("console_token", consoleToken()); // a WebSocket carries no header of ours
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    return `${scheme}//${location.host}/v1/sessions/${sessionId}/sandbox/pty?${query}`;
  }

  function connect(attempt) {
    const ws = new WebSocket(address()); // the cookie goes along; the server checks the Origin and the token
    ws.binaryType = "arraybuffer";
    ws.attached = false;
    socket = ws;
    ws.onmessage = (message) => {
      if (typeof message.data === "string") return control(JSON.parse(message.data));
      const bytes = new Uint8Array(message.data);
      if (bytes.length === 0) return; // the server's keepalive
      if (bytes[0] === STDOUT || bytes[0] === STDERR) {
        offset += bytes.length - 1;
        term.write(bytes.subarray(1));
      } else if (bytes[0] === EXIT && bytes.length === 5) {
        const code = new DataView(bytes.buffer).getInt32(1);
        term.write(`\r\n[exited with code ${code}]\r\n`);
        sessionStorage.removeItem(storageKey);
        closed = true;
        state.textContent = `exited (${code})`;
      }
    };
    ws.onclose = (event) => {
      clearInterval(keepalive);
      if (closed || ws !== socket) return;
      if (event.code === 1000) { state.textContent = "ended"; return; }
      if (refused(event.code)) { state.textContent = `refused (${event.code}): ${event.reason}`; closed = true; return; }
      if (ws.attached) dropped();
      else retry = setTimeout(() => connect(attempt + 1), backoff(attempt + 1));
    };
  }

  function control(message) {
    if (message.type === "attached") {
      socket.attached = true;
      terminalId = message.id;
      sessionStorage.setItem(storageKey, terminalId);
      state.textContent = `attached ${terminalId}`;
      if (redials.length) state.textContent += ` (redialled ${redials.length})`;
      keepalive = setInterval(() => socket && socket.readyState === 1 && socket.send(new Uint8Array(0)), KEEPALIVE_MS);
      sendSize();
    } else if (message.type === "offset" || message.type === "replayed") {
      offset = Number(message.offset);
    }
  }

  function dropped() {
    const now = Date.now();
    redials = redials.filter((t) => now - t < FLAP_WINDOW_MS).concat(now);
    if (redials.length > FLAP_LIMIT) {
      state.textContent = `the connection keeps dropping: ${redials.length} redials within ${FLAP_WINDOW_MS / 1000} s; giving up`;
      closed = true;
      return;
    }
    state.textContent = "reconnecting…";
    retry = setTimeout(() => connect(0), backoff(0));
  }

  const backoff = (attempt) => Math.min(BACKOFF_MAX_MS, BACKOFF_INITIAL_MS * 2 ** attempt) * (0.5 + Math.random());

  function sendSize() {
    if (socket && socket.readyState === 1) socket.send(JSON.stringify({ type: "resize", rows: term.rows, cols: term.cols }));
  }

  term.onData((data) => {
    if (!socket || socket.readyState !== 1) return;
    const bytes = encoder.encode(data);
    const frame = new Uint8Array(bytes.length + 1);
    frame[0] = STDIN;
    frame.set(bytes, 1);
    socket.send(frame);
  });
  const onResize = () => { fit.fit(); sendSize(); };
  window.addEventListener("resize", onResize);
  fresh.addEventListener("click", () => {
    sessionStorage.removeItem(storageKey);
    terminalId = null; offset = 0; redials = [];
    const old = socket; socket = null; closed = false;
    if (old) old.close(1000);
    term.reset();
    connect(0);
  });
  connect(0);
  term.focus();
  return () => {
    closed = true;
    clearTimeout(retry);
    clearInterval(keepalive);
    window.removeEventListener("resize", onResize);
    if (socket) socket.close(1000);
    term.dispose();
  };
}
