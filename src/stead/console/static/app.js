// The console's shell: log in, the navigation, and the pages by location hash
// (#/sessions, #/sessions/<id>, #/sessions/<id>/terminal, #/agents, ...), so a
// reload shows the same page.
import { ApiError, el, get, keepConsoleToken, request } from "./api.js";
import { agentsPage } from "./agents.js";
import { environmentsPage, filesPage, memoryStoresPage, vaultsPage } from "./resources.js";
import { sessionPage } from "./session.js";
import { sessionsPage } from "./sessions.js";
import { terminalPage } from "./terminal.js";
import { usagePage } from "./usage.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
let leave = null; // the current page's clean-up (streams, timers, sockets)
// Which page was asked for last: a page still loading when another is asked for
// draws into its own element, no longer shown, and its clean-up runs as soon
// as it returns (it neither covers the newer page nor keeps streaming).
let asked = 0;

const ROUTES = [
  [/^#\/sessions\/([\w-]+)\/terminal$/, terminalPage],
  [/^#\/sessions\/([\w-]+)$/, sessionPage],
  [/^#\/sessions$/, sessionsPage],
  [/^#\/agents(?:\/([\w-]+))?$/, agentsPage],
  [/^#\/environments$/, environmentsPage],
  [/^#\/vaults$/, vaultsPage],
  [/^#\/files$/, filesPage],
  [/^#\/memory_stores(?:\/([\w-]+))?$/, memoryStoresPage],
  [/^#\/usage$/, usagePage],
];

function loginPage(message) {
  asked++;
  nav.hidden = true;
  const key = el("input", { type: "password", name: "api_key", placeholder: "sk-stead-…", autocomplete: "off", required: true });
  const problem = el("p", { class: "error", id: "login-error", text: message || "" });
  const form = el("form", { class: "login", id: "login" },
    el("h1", { text: "Log in to stead" }),
    el("label", { text: "API key" }), key,
    el("button", { class: "primary", type: "submit", text: "Log in" }), problem,
    el("p", { class: "muted", text: "The key is kept, sealed, in an HttpOnly cookie for 12 hours." }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    problem.textContent = "";
    try {
      const login = await request("POST", "/console/login", { api_key: key.value });
      keepConsoleToken(login.console_token);
      if (!location.hash || location.hash === "#/login") location.hash = "#/sessions";
      route();
    } catch (error) {
      problem.textContent = error.message;
    }
  });
  main.replaceChildren(form);
  key.focus();
}

async function route() {
  const mine = ++asked;
  if (leave) { leave(); leave = null; }
  const hash = location.hash || "#/sessions";
  for (const [pattern, page] of ROUTES) {
    const match = hash.match(pattern);
    if (!match) continue;
    nav.hidden = false;
    for (const link of nav.querySelectorAll("a")) {
      link.classList.toggle("active", hash.startsWith(link.getAttribute("href")));
    }
    const view = el("div", { class: "page" }, el("p", { class: "muted", text: "Loading…" }));
    main.replaceChildren(view);
    try {
      const done = (await page(view, ...match.slice(1))) || null;
      if (mine === asked) leave = done;
      else if (done) done(); // left while it loaded
    } catch (error) {
      if (mine !== asked) return;
      if (error instanceof ApiError && error.status === 401) return loginPage();
      view.replaceChildren(el("p", { class: "error", id: "page-error", text: error.message }));
    }
    return;
  }
  location.hash = "#/sessions";
}

document.getElementById("logout").addEventListener("click", async () => {
  await request("POST", "/console/logout");
  keepConsoleToken(null);
  if (leave) { leave(); leave = null; }
  loginPage("Logged out.");
});
window.addEventListener("stead-logged-out", () => { if (leave) { leave(); leave = null; } loginPage(); });
window.addEventListener("hashchange", route);

(async () => {
  try {
    await get("/v1/agents?limit=1"); // logged in already (the cookie is HttpOnly: ask the server)
    route();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) loginPage();
    else main.replaceChildren(el("p", { class: "error", text: error.message }));
  }
})();
