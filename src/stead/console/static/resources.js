// Environments, vaults (names and credential kinds; the API never returns a
// secret and the console shows only named fields), files and memory stores.
import { age, consoleHeaders, el, get, listAll } from "./api.js";

function table(id, heads, rows) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, heads.map((t) => el("th", { text: t })))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: heads.length, class: "muted", text: "None yet." }))));
}

export async function environmentsPage(main) {
  const environments = await listAll("/v1/environments?limit=100");
  main.replaceChildren(el("h1", { text: "Environments" }), table("environments", ["Environment", "Networking", "Packages", "Created"],
    environments.map((env) => {
      const config = env.config || {};
      const networking = config.networking ? config.networking.type : "";
      const packages = Object.entries(config.packages || {}).filter(([k, v]) => Array.isArray(v) && v.length).map(([k, v]) => `${k}: ${v.join(", ")}`).join("; ");
      return el("tr", {},
        el("td", {}, env.name, el("div", { class: "muted mono", text: env.id }), env.archived_at ? el("span", { class: "status", text: "archived" }) : null),
        el("td", { text: networking }), el("td", { class: "mono", text: packages }), el("td", { text: age(env.created_at) }));
    })));
}

export async function vaultsPage(main) {
  const vaults = await listAll("/v1/vaults?limit=100");
  const sections = [];
  for (const vault of vaults) {
    const credentials = await listAll(`/v1/vaults/${vault.id}/credentials?limit=100`);
    sections.push(el("h2", {}, vault.display_name, el("span", { class: "muted mono", text: `  ${vault.id}` })),
      table(`credentials-${vault.id}`, ["Credential", "Kind", "For", "Updated"], credentials.map((c) => el("tr", {},
        el("td", {}, c.display_name || "", el("div", { class: "muted mono", text: c.id })),
        el("td", { text: (c.auth && c.auth.type) || "" }),
        el("td", { class: "mono", text: (c.auth && (c.auth.mcp_server_url || c.auth.secret_name)) || "" }),
        el("td", { text: age(c.updated_at) })))));
  }
  main.replaceChildren(el("h1", { text: "Vaults" }),
    el("p", { class: "muted", text: "Secrets are write-only: stead never returns them, and this page shows none." }),
    ...(sections.length ? sections : [el("p", { class: "muted", text: "No vaults yet." })]));
}

export async function filesPage(main) {
  const files = await listAll("/v1/files?limit=100");
  main.replaceChildren(el("h1", { text: "Files" }), table("files", ["File", "Type", "Size", "Created", ""],
    files.map((file) => el("tr", {},
      el("td", {}, file.filename, el("div", { class: "muted mono", text: file.id })),
      el("td", { class: "mono", text: file.mime_type }),
      el("td", { class: "num", text: size(file.size_bytes) }),
      el("td", { text: age(file.created_at) }),
      el("td", {}, el("button", { type: "button", text: "Download", onclick: () => download(file) }))))));
}

function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 ** 2) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
}

async function download(file) {
  // A plain link would not carry the console's header: fetch, then save the bytes.
  const response = await fetch(`/v1/files/${file.id}/content`, { headers: consoleHeaders(), credentials: "same-origin" });
  if (!response.ok) return alert(`download failed: HTTP ${response.status}`);
  const url = URL.createObjectURL(await response.blob());
  const link = el("a", { href: url, download: file.filename });
  document.body.append(link);
  link.click();
  link.remove();
  URL.revokeObjectURL(url);
}

export async function memoryStoresPage(main, storeId) {
  if (storeId) return memoryStorePage(main, storeId);
  const stores = await listAll("/v1/memory_stores?limit=100&include_archived=true");
  main.replaceChildren(el("h1", { text: "Memory stores" }), table("memory-stores", ["Store", "Description", "Created"],
    stores.map((store) => el("tr", {},
      el("td", {}, el("a", { href: `#/memory_stores/${store.id}`, text: store.name }),
        el("div", { class: "muted mono", text: store.id }), store.archived_at ? el("span", { class: "status", text: "archived" }) : null),
      el("td", { text: store.description || "" }),
      el("td", { text: age(store.created_at) })))));
}

async function memoryStorePage(main, storeId) {
  const store = await get(`/v1/memory_stores/${storeId}`);
  // Listed without depth, so every memory shows (prefixes fold only with a depth).
  const memories = await listAll(`/v1/memory_stores/${storeId}/memories?limit=100`);
  const shown = el("pre", { id: "memory-content", class: "mono" });
  main.replaceChildren(el("h1", { text: store.name }), el("p", { class: "muted mono", text: store.id }),
    table("memories", ["Path", "Size", "Updated"], memories.filter((m) => m.type === "memory").map((memory) => el("tr", {},
      el("td", {}, el("button", { type: "button", class: "link mono", text: memory.path, onclick: async () => {
        const full = await get(`/v1/memory_stores/${storeId}/memories/${memory.id}?view=full`);
        shown.textContent = full.content;
      } })),
      el("td", { class: "num", text: size(memory.content_size_bytes) }),
      el("td", { text: age(memory.updated_at) })))),
    shown);
}
