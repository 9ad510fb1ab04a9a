// One element per event of a session's log: messages, thinking (folded), tool
// calls with their input and (once it arrives) output, MCP calls, errors,
// model-request spans with latency and usage.
import { el } from "./api.js";

function texts(content) {
  return (content || []).map((block) => {
    if (block.type === "text") return block.text;
    if (block.type === "image") return "[image]";
    if (block.type === "document") return "[document]";
    return `[${block.type}]`;
  }).join("\n");
}

const json = (value) => JSON.stringify(value, null, 2);

export class Timeline {
  constructor(root) {
    this.root = root;
    this.nodes = new Map(); // event id -> element
    this.toolUses = new Map(); // tool use id -> element holding its result
    this.spans = new Map(); // model_request_start id -> start time
  }

  add(event) {
    if (!event.id || event.type === "ping") return;
    const previous = this.nodes.get(event.id);
    const node = this.render(event);
    if (!node) return;
    node.dataset.id = event.id;
    node.dataset.type = event.type;
    if (event.processed_at === null) node.classList.add("queued");
    if (previous) previous.replaceWith(node); // a queued message, now processed
    else this.root.append(node);
    this.nodes.set(event.id, node);
  }

  card(kind, title, ...children) {
    return el("div", { class: `event ${kind}` }, el("div", { class: "kind", text: title }), ...children);
  }

  render(event) {
    switch (event.type) {
      case "user.message":
        return this.card("user", event.processed_at === null ? "user (queued)" : "user", el("pre", { text: texts(event.content) }));
      case "agent.message":
        return this.card("agent", "agent", el("pre", { text: texts(event.content) }));
      case "agent.thinking":
        return this.card("agent", "thinking", el("details", {}, el("summary", { text: "thinking" }), el("pre", { text: event.thinking || "(thinking)" })));
      case "agent.tool_use":
      case "agent.custom_tool_use":
      case "agent.mcp_tool_use":
        return this.toolUse(event);
      case "agent.tool_result":
      case "agent.mcp_tool_result":
      case "user.tool_result":
      case "user.custom_tool_result":
        return this.toolResult(event);
      case "user.tool_confirmation":
        return el("div", { class: "event status", text: `tool ${event.result}${event.deny_message ? `: ${event.deny_message}` : ""}` });
      case "user.interrupt":
        return el("div", { class: "event status", text: "interrupted" });
      case "session.error":
        return this.card("error", "error", el("pre", { class: "error", text: event.error ? `${event.error.type}: ${event.error.message}` : json(event) }));
      case "span.model_request_start":
        this.spans.set(event.id, Date.parse(event.processed_at));
        return el("div", { class: "event span", text: "model request…" });
      case "span.model_request_end": {
        const start = this.spans.get(event.model_request_start_id);
        const took = start ? ` in ${((Date.parse(event.processed_at) - start) / 1000).toFixed(2)} s` : "";
        const u = event.model_usage || {};
        const startNode = this.nodes.get(event.model_request_start_id);
        if (startNode) startNode.remove();
        return el("div", { class: `event span${event.is_error ? " error" : ""}`,
          text: `model request${event.is_error ? " failed" : ""}${took} · ${u.input_tokens || 0} in / ${u.output_tokens || 0} out tokens` });
      }
      case "session.usage": {
        const u = event.usage || {};
        const cost = u.list_cost ? ` · $${(Number(u.list_cost.amount) / 100).toFixed(2)}` : "";
        return el("div", { class: "event span", text: `session usage: ${u.input_tokens || 0} in / ${u.output_tokens || 0} out / ${u.cache_read_input_tokens || 0} cache read tokens${cost}` });
      }
      default:
        if (event.type.startsWith("session.status_")) return this.status(event);
        return this.card("", event.type, el("pre", { text: json(event) }));
    }
  }

  status(event) {
    const name = event.type.slice("session.status_".length);
    // A refusal says what the upstream gave of it: its category and explanation.
    const details = event.stop_details || {};
    const why = [details.category, details.explanation].filter(Boolean).join(": ");
    const reason = event.stop_reason ? ` (${event.stop_reason.type}${why ? ` · ${why}` : ""})` : "";
    return el("div", { class: "event status", text: `${name}${reason}` });
  }

  toolUse(event) {
    const server = event.mcp_server_name ? `${event.mcp_server_name} · ` : "";
    const label = event.type === "agent.mcp_tool_use" ? "MCP tool" : event.type === "agent.custom_tool_use" ? "custom tool" : "tool";
    const waiting = event.type === "agent.custom_tool_use" ? "waiting for its result"
      : event.evaluated_permission === "ask" ? "waiting for confirmation" : "running…";
    const result = el("div", { class: "result muted", text: waiting });
    this.toolUses.set(event.id, result);
    const permission = event.evaluated_permission && event.evaluated_permission !== "allow" ? ` · ${event.evaluated_permission}` : "";
    return this.card("tool", `${label}${permission}`, el("div", { class: "mono" }, el("strong", { text: `${server}${event.name}` })),
      el("pre", { class: "tool-input", text: json(event.input) }), result);
  }

  toolResult(event) {
    const useId = event.tool_use_id || event.mcp_tool_use_id || event.custom_tool_use_id;
    const holder = this.toolUses.get(useId);
    const output = el("pre", { class: `tool-output${event.is_error ? " error" : ""}`, text: texts(event.content) || "(no output)" });
    if (holder) {
      holder.className = "result";
      holder.replaceChildren(el("div", { class: "kind", text: event.is_error ? "error" : "output" }), output);
      if (event.is_error) holder.closest(".event").classList.add("failed");
      return el("div", { hidden: true }); // the result shows under its call
    }
    return this.card(`tool${event.is_error ? " failed" : ""}`, "tool result", output);
  }
}
