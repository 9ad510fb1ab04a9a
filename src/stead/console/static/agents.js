// Agents: the list, one agent's versions, and a line diff between two versions.
import { age, el, get, listAll } from "./api.js";

export async function agentsPage(main, agentId) {
  if (agentId) return agentPage(main, agentId);
  const agents = await listAll("/v1/agents?limit=100");
  main.replaceChildren(el("h1", { text: "Agents" }), el("table", { id: "agents" },
    el("thead", {}, el("tr", {}, ...["Agent", "Model", "Version", "Updated"].map((t) => el("th", { text: t })))),
    el("tbody", {}, agents.map((agent) => el("tr", {},
      el("td", {}, el("a", { href: `#/agents/${agent.id}`, text: agent.name }), el("div", { class: "muted mono", text: agent.id })),
      el("td", { class: "mono", text: modelName(agent.model) }),
      el("td", { text: `v${agent.version}` }),
      el("td", { text: age(agent.updated_at) }))))));
}

const modelName = (model) => (typeof model === "string" ? model : model && model.id) || "";

async function agentPage(main, agentId) {
  const agent = await get(`/v1/agents/${agentId}`);
  const versions = await listAll(`/v1/agents/${agentId}/versions?limit=100`);
  versions.sort((a, b) => a.version - b.version);
  const pick = (id, chosen) => el("select", { id }, versions.map((v) =>
    el("option", { value: String(v.version), selected: v.version === chosen, text: `v${v.version}` })));
  const older = pick("diff-from", versions.length > 1 ? versions[versions.length - 2].version : versions[0].version);
  const newer = pick("diff-to", versions[versions.length - 1].version);
  const out = el("div", { class: "diff", id: "diff" });
  const show = () => {
    const find = (select) => versions.find((v) => String(v.version) === select.value);
    out.replaceChildren(...diffLines(pretty(find(older)), pretty(find(newer))));
  };
  older.addEventListener("change", show);
  newer.addEventListener("change", show);
  main.replaceChildren(
    el("h1", {}, el("a", { href: "#/agents", text: "Agents" }), ` / ${agent.name}`),
    el("p", { class: "muted mono", text: `${agent.id} · ${modelName(agent.model)} · v${agent.version}` }),
    el("h2", { text: "Versions" }),
    el("table", { id: "versions" }, el("tbody", {}, versions.map((v) => el("tr", {},
      el("td", { text: `v${v.version}` }), el("td", { text: v.name }), el("td", { class: "muted", text: v.updated_at || v.created_at || "" }))))),
    el("h2", { text: "Diff" }), el("div", { class: "toolbar" }, older, "→", newer), out);
  show();
}

function pretty(version) {
  const { updated_at, created_at, archived_at, version: _, ...rest } = version;
  return JSON.stringify(rest, null, 2).split("\n");
}

// The lines of a longest-common-subsequence diff: kept, removed (-) and added (+).
export function diffLines(a, b) {
  const n = a.length, m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const lines = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { lines.push(el("div", { text: `  ${a[i]}` })); i++; j++; }
    else if (i < n && (j === m || lcs[i + 1][j] >= lcs[i][j + 1])) { lines.push(el("div", { class: "del", text: `- ${a[i]}` })); i++; }
    else { lines.push(el("div", { class: "add", text: `+ ${b[j]}` })); j++; }
  }
  return lines;
}
