// A session: its live timeline (history, then the stream), sending a message,
// interrupting, and answering requires_action (tool confirmations and custom
// tool results).
import { dollars, el, get, listAll, post, streamEvents, tokens } from "./api.js";
import { Timeline } from "./timeline.js";

export async function sessionPage(main, sessionId) {
  const base = `/v1/sessions/${sessionId}`;
  let session = await get(base);
  const history = await listAll(`${base}/events?limit=1000`);
  const status = el("span", { class: `status ${session.status}`, id: "session-status" });
  const usage = el("span", { class: "muted", id: "session-usage" });
  const streamState = el("span", { class: "muted", id: "stream-state" });
  const actions = el("div", { id: "actions" });
  const list = el("div", { class: "timeline", id: "timeline" });
  const timeline = new Timeline(list);
  const byId = new Map();

  function showSession() {
    status.className = `status ${session.status}`;
    status.textContent = session.status;
    usage.textContent = `${tokens(session.usage).toLocaleString()} tokens · ${dollars(session.usage.list_cost)}`;
  }

  function showActions(stop) {
    actions.replaceChildren();
    if (!stop || stop.type !== "requires_action") return;
    for (const id of stop.event_ids || []) {
      const use = byId.get(id);
      if (!use) continue;
      actions.append(use.type === "agent.custom_tool_use" ? customAnswer(use) : confirmation(use));
    }
  }

  function confirmation(use) {
    const reason = el("input", { placeholder: "reason (for deny)", class: "deny-message" });
    const answer = (result) => send([{ type: "user.tool_confirmation", tool_use_id: use.id, result,
      ...(result === "deny" && reason.value ? { deny_message: reason.value } : {}) }]);
    return el("div", { class: "confirm", "data-tool-use": use.id },
      el("div", {}, "The agent asks to run ", el("strong", { text: use.name }), ":"),
      el("pre", { text: JSON.stringify(use.input, null, 2) }),
      el("div", { class: "toolbar" },
        el("button", { class: "primary", type: "button", onclick: () => answer("allow"), text: "Allow" }),
        el("button", { class: "danger", type: "button", onclick: () => answer("deny"), text: "Deny" }), reason));
  }

  function customAnswer(use) {
    const text = el("textarea", { placeholder: "the tool's result" });
    const error = el("input", { type: "checkbox" });
    return el("div", { class: "confirm", "data-tool-use": use.id },
      el("div", {}, "Custom tool ", el("strong", { text: use.name }), " waits for its result:"),
      el("pre", { text: JSON.stringify(use.input, null, 2) }), text,
      el("div", { class: "toolbar" }, el("label", {}, error, " is an error"),
        el("button", { class: "primary", type: "button", text: "Send result", onclick: () => send([{
          type: "user.custom_tool_result", custom_tool_use_id: use.id, is_error: error.checked,
          content: [{ type: "text", text: text.value }] }]) })));
  }

  const problem = el("p", { class: "error", id: "send-error" });
  async function send(events) {
    problem.textContent = "";
    try { await post(`${base}/events`, { events }); } catch (error) { problem.textContent = error.message; }
  }

  // The session again (its usage, its status) after a turn or a model request
  // ends live: one request at a time, and one more if asked for meanwhile. Not
  // for the history's events: it asked once per turn and model request, all at
  // once, as the page opened.
  let live = false, fetching = false, again = false;
  async function refreshSession() {
    if (fetching) { again = true; return; }
    fetching = true;
    try {
      do {
        again = false;
        try { session = await get(base); showSession(); } catch { /* the next one may answer */ }
      } while (again);
    } finally { fetching = false; }
  }

  let lastStop = null;
  function take(event) {
    if (event.type === "ping") return;
    byId.set(event.id, event);
    timeline.add(event);
    if (event.type.startsWith("session.status_")) {
      session.status = event.type.slice("session.status_".length);
      lastStop = event.stop_reason || null;
      showActions(lastStop);
      showSession();
    }
    if (live && (event.type === "session.status_idle" || event.type === "span.model_request_end")) {
      refreshSession();
    }
  }

  const input = el("textarea", { id: "message", placeholder: "Message the agent…" });
  const composer = el("form", { class: "composer", id: "composer" }, input,
    el("button", { class: "primary", type: "submit", text: "Send" }));
  composer.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    await send([{ type: "user.message", content: [{ type: "text", text }] }]);
    if (!problem.textContent) input.value = "";
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) composer.requestSubmit();
  });

  main.replaceChildren(
    el("h1", {}, session.title || sessionId),
    el("div", { class: "toolbar" }, status, usage,
      el("span", { class: "muted", text: `agent ${session.agent.name || session.agent.id} v${session.agent.version}` }),
      el("a", { href: `#/sessions/${sessionId}/terminal`, id: "open-terminal" }, el("button", { type: "button", text: "Terminal" })),
      el("button", { type: "button", id: "interrupt", class: "danger", text: "Interrupt", onclick: () => send([{ type: "user.interrupt" }]) }),
      streamState),
    list, actions, problem, composer);
  for (const event of history) take(event);
  session = await get(base); // the history may end before the newest status
  showSession();
  live = true;
  const logged = history.filter((e) => e.processed_at);
  const after = logged.length ? logged[logged.length - 1].id : null;
  const stop = streamEvents(sessionId, after, take, (state) => { streamState.textContent = `stream: ${state}`; });
  return stop;
}
