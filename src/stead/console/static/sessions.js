// The sessions list: status, agent, age, tokens and cost, refreshed while shown,
// a hundred at a time, newest first; Older and Newer page through the rest.
import { age, dollars, el, get, tokens } from "./api.js";

const REFRESH_MS = 2000;
const PAGE_SIZE = 100;

export async function sessionsPage(main) {
  const body = el("tbody");
  const note = el("p", { class: "muted", id: "sessions-note" });
  const cursors = [null]; // the cursor of each page walked to, the shown one last
  let next = null;
  let asked = 0; // a refresh that answers after a newer one was asked for is dropped
  const newer = el("button", { type: "button", id: "sessions-newer", text: "← Newer", hidden: true });
  const older = el("button", { type: "button", id: "sessions-older", text: "Older →", hidden: true });
  main.replaceChildren(
    el("h1", { text: "Sessions" }),
    el("table", { id: "sessions" },
      el("thead", {}, el("tr", {},
        el("th", { text: "Session" }), el("th", { text: "Status" }), el("th", { text: "Agent" }),
        el("th", { text: "Age" }), el("th", { class: "num", text: "Tokens" }), el("th", { class: "num", text: "Cost" }))),
      body),
    el("div", { class: "toolbar" }, newer, older),
    note);
  async function refresh() {
    const mine = ++asked;
    const cursor = cursors[cursors.length - 1];
    const query = cursor ? `&page=${encodeURIComponent(cursor)}` : "";
    const page = await get(`/v1/sessions?limit=${PAGE_SIZE}&order=desc${query}`);
    if (mine !== asked) return;
    body.replaceChildren(...page.data.map(row));
    next = page.next_page || null;
    older.hidden = !next;
    newer.hidden = cursors.length === 1;
    note.textContent = page.data.length ? `Updated ${new Date().toLocaleTimeString()}` : "No sessions yet.";
  }
  const walk = async (step) => {
    step();
    try { await refresh(); } catch (error) { note.textContent = error.message; }
  };
  older.addEventListener("click", () => walk(() => { if (next) cursors.push(next); }));
  newer.addEventListener("click", () => walk(() => { if (cursors.length > 1) cursors.pop(); }));
  await refresh();
  let timer = null;
  let stopped = false;
  const loop = async () => {
    try { await refresh(); } catch (error) { note.textContent = error.message; }
    if (!stopped) timer = setTimeout(loop, REFRESH_MS);
  };
  timer = setTimeout(loop, REFRESH_MS);
  return () => { stopped = true; clearTimeout(timer); };
}

function row(session) {
  const agent = session.agent || {};
  return el("tr", { "data-session": session.id },
    el("td", {}, el("a", { href: `#/sessions/${session.id}`, text: session.title || session.id }),
      session.title ? el("div", { class: "muted mono", text: session.id }) : null),
    el("td", {}, el("span", { class: `status ${session.status}`, text: session.status })),
    el("td", {}, agent.name || agent.id || "", agent.version ? el("span", { class: "muted", text: ` v${agent.version}` }) : null),
    el("td", { title: session.created_at, text: age(session.created_at) }),
    el("td", { class: "num", text: tokens(session.usage).toLocaleString() }),
    el("td", { class: "num", text: dollars(session.usage && session.usage.list_cost) }));
}
