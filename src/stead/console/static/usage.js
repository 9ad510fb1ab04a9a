// Usage per day and per agent, from GET /v1/usage (rows per day, session and
// model); sessions name their agent. Charts are SVG bars.
import { ApiError, dollars, el, get, listAll, tokens } from "./api.js";

const SVG = "http://www.w3.org/2000/svg";
const DAYS = 30;

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  node.append(...children);
  return node;
}

export function barChart(id, bars) {
  const width = 900, height = 220, pad = 40;
  const most = Math.max(1, ...bars.map((b) => b.value));
  const step = (width - pad) / Math.max(1, bars.length);
  const chart = svg("svg", { id, viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img" });
  bars.forEach((bar, i) => {
    const h = ((height - pad) * bar.value) / most;
    const rect = svg("rect", { class: "bar", x: pad + i * step + 2, y: height - pad - h, width: Math.max(1, step - 4), height: h });
    rect.append(svg("title", {}, `${bar.label}: ${bar.value.toLocaleString()} tokens`));
    chart.append(rect);
    if (bars.length <= 12 || i % Math.ceil(bars.length / 12) === 0) {
      chart.append(svg("text", { x: pad + i * step + step / 2, y: height - pad + 14, "text-anchor": "middle" }, bar.label));
    }
  });
  chart.append(svg("text", { x: 0, y: 12 }, most.toLocaleString()), svg("text", { x: 0, y: height - pad }, "0"));
  return el("div", { class: "chart" }, chart);
}

// The list reads at most its first pages (the newest sessions): a session older
// than those, with usage in the report, is asked for by its id, a few at a time.
async function nameTheRest(agentOf, rows) {
  const missing = [...new Set(rows.map((row) => row.session_id))].filter((id) => id && !agentOf.has(id));
  const ask = async () => {
    for (let id = missing.pop(); id; id = missing.pop()) {
      try {
        const session = await get(`/v1/sessions/${encodeURIComponent(id)}`);
        agentOf.set(id, session.agent.name || session.agent.id);
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 404)) throw error;
      }
    }
  };
  await Promise.all(Array.from({ length: 6 }, ask));
}

export async function usagePage(main) {
  const to = new Date();
  const from = new Date(to.getTime() - (DAYS - 1) * 86400000);
  const day = (d) => d.toISOString().slice(0, 10);
  const report = await get(`/v1/usage?from=${day(from)}&to=${day(to)}`);
  // Archived sessions too: their usage is still their agent's.
  const sessions = await listAll("/v1/sessions?limit=100&include_archived=true");
  const agentOf = new Map(sessions.map((s) => [s.id, s.agent.name || s.agent.id]));
  await nameTheRest(agentOf, report.data);
  const perDay = new Map();
  for (let t = from.getTime(); t <= to.getTime(); t += 86400000) perDay.set(day(new Date(t)), 0);
  const perAgent = new Map();
  for (const row of report.data) {
    const used = tokens(row);
    perDay.set(row.day, (perDay.get(row.day) || 0) + used);
    const agent = agentOf.get(row.session_id) || "(deleted session)";
    const entry = perAgent.get(agent) || { tokens: 0, cents: 0, requests: 0 };
    entry.tokens += used;
    entry.cents += Number(row.list_cost.amount);
    entry.requests += row.requests || 0;
    perAgent.set(agent, entry);
  }
  const agents = [...perAgent.entries()].sort((a, b) => b[1].tokens - a[1].tokens);
  main.replaceChildren(
    el("h1", { text: "Usage" }),
    el("p", { class: "muted", id: "usage-total", text: `${report.from} to ${report.to}: ${tokens(report.total).toLocaleString()} tokens, ${report.total.requests} model requests, ${dollars(report.total.list_cost)} at list price` }),
    el("h2", { text: "Tokens per day" }),
    barChart("usage-per-day", [...perDay.entries()].map(([label, value]) => ({ label: label.slice(5), value }))),
    el("h2", { text: "Tokens per agent" }),
    barChart("usage-per-agent", agents.map(([label, e]) => ({ label, value: e.tokens }))),
    el("table", { id: "usage-agents" },
      el("thead", {}, el("tr", {}, ["Agent", "Requests", "Tokens", "Cost"].map((t, i) => el("th", { class: i ? "num" : null, text: t })))),
      el("tbody", {}, agents.map(([name, e]) => el("tr", {}, el("td", { text: name }), el("td", { class: "num", text: e.requests }),
        el("td", { class: "num", text: e.tokens.toLocaleString() }), el("td", { class: "num", text: dollars({ amount: e.cents }) }))))));
}
