// The threadstore page: a chat list and a chat view over the server's JSON API and its
// AG-UI endpoint. No framework and no build step; markdown goes through marked, then
// DOMPurify, and raw HTML inside a message is shown as text, never interpreted.

const TOKEN_KEY = "threadstore.token";
const PAGE_SIZE = 50;
const RECONNECT_DELAYS_MS = [250, 500, 1000, 2000, 4000, 8000];

// --- HTTP -------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

let token = sessionStorage.getItem(TOKEN_KEY);

function authHeaders(extra = {}) {
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

async function errorOf(response) {
  let detail = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (typeof body.detail === "string") detail = body.detail;
    else if (body.detail) detail = JSON.stringify(body.detail);
  } catch {
    // Not JSON: keep the status line.
  }
  return new ApiError(response.status, detail);
}

// fetch() with the caller's token. A 401 asks for a token (saying when the one tried was
// refused) and tries again; requests refused at once share one prompt.
async function send(path, init = {}) {
  while (true) {
    const used = token;
    const response = await fetch(path, { ...init, headers: authHeaders(init.headers) });
    if (response.status === 401) {
      if (token === used) await askForToken(used ? "That token was not accepted." : null);
      continue;
    }
    if (!response.ok) throw await errorOf(response);
    return response;
  }
}

async function api(method, path, body) {
  const init = { method };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    init.headers = { "Content-Type": "application/json" };
  }
  const response = await send(path, init);
  return response.status === 204 ? null : response.json();
}

// --- server-sent events over fetch (EventSource cannot send an Authorization header) -----

async function* sseFrames(response, signal) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.search(/\r\n\r\n|\n\n|\r\r/)) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + (buffer[cut] === "\r" && buffer[cut + 1] === "\n" ? 4 : 2));
        let id = null;
        const data = [];
        for (const line of block.split(/\r\n|\n|\r/)) {
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "id") id = text;
          else if (field === "data") data.push(text);
        }
        if (data.length) yield { id: id === null ? null : Number(id), event: JSON.parse(data.join("\n")) };
      }
    }
  } finally {
    if (signal && signal.aborted) reader.cancel().catch(() => {});
  }
}

// --- the message model shared by stored history and live events -------------------------
//
// A message is { id, role, status, error, runId, parts: [...] } where each part is
// { kind: "text", text } | { kind: "reasoning", text, encrypted } |
// { kind: "tool", id, name, args, result, status, error } |
// { kind: "data", name, id, payload } (a CUSTOM event or an activity) | { kind: "citation", citation }.

function reasoningPart(reasoning, text) {
  return { kind: "reasoning", text, encrypted: Boolean(reasoning.encrypted_value), status: reasoning.status };
}

function toolPart(call) {
  return { kind: "tool", id: call.tool_call_id, name: call.name, args: call.arguments || "", result: call.content, status: call.status, error: call.error };
}

// A stored record's entries in its message's parts order (metadata.parts, written by the
// storage fold; rows from before it have none).
function entriesOf(record) {
  const order = record.metadata && record.metadata.parts;
  return Array.isArray(order) ? order.filter((e) => e && Number.isInteger(e.n)) : [];
}

// The pieces of ``text`` its entries start, each running to the next start: [[n, piece]].
function segments(entries, text) {
  const starts = entries
    .filter((e) => (e.type === "text" || e.type === "reasoning") && !e.encrypted)
    .map((e) => [e.start || 0, e.n])
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  return starts.map(([start, n], i) => [n, text.slice(start, i + 1 < starts.length ? starts[i + 1][0] : text.length)]);
}

// The parts of a stored message in the order they were produced, as the chat engine's
// ui_from_messages reads them; null when the message was stored without an order.
function orderedParts(stored) {
  const placed = [];
  for (const [n, text] of segments(entriesOf(stored), stored.content || "")) if (text) placed.push([n, { kind: "text", text }]);
  for (const reasoning of stored.reasonings || []) {
    const entries = entriesOf(reasoning);
    for (const [n, text] of segments(entries, reasoning.content || "")) if (text) placed.push([n, reasoningPart(reasoning, text)]);
    for (const e of entries) if (e.encrypted) placed.push([e.n, reasoningPart(reasoning, "")]);
  }
  for (const call of stored.tool_calls || []) for (const e of entriesOf(call)) placed.push([e.n, toolPart(call)]);
  for (const e of entriesOf(stored)) {
    const part = listedPart(e, stored);
    if (part) placed.push([e.n, part]);
  }
  if (!placed.length) return null;
  return placed.sort((a, b) => a[0] - b[0]).map(([, part]) => part);
}

// A message's own entry: a CUSTOM event's data or citation (its payload kept in the
// entry), or an activity message itself.
function listedPart(entry, stored) {
  if (entry.type === "citation") return { kind: "citation", citation: entry.citation };
  if (entry.type !== "data") return null;
  if ("name" in entry) return { kind: "data", name: String(entry.name), id: entry.id, payload: entry.payload };
  if (stored.role === "activity") return activityPart(stored);
  return null;
}

function activityPart(stored) {
  return { kind: "data", name: stored.activity_type || "activity", id: stored.agui_id, payload: stored.activity_content || {} };
}

function messageFromStored(stored) {
  let parts = orderedParts(stored);
  if (parts === null) {
    // Bucket order: reasoning, text, tool calls.
    parts = (stored.reasonings || []).map((r) => reasoningPart(r, r.content || ""));
    if (stored.role !== "reasoning" && stored.role !== "activity" && stored.content) parts.push({ kind: "text", text: stored.content });
    parts.push(...(stored.tool_calls || []).map(toolPart));
    if (stored.role === "activity") parts.push(activityPart(stored));
  }
  return {
    id: stored.agui_id || stored.message_uuid, // messages stored without an AG-UI id still count
    uuid: stored.message_uuid,
    seq: stored.seq,
    role: stored.role,
    status: stored.status,
    inProgress: stored.in_progress,
    error: stored.error || null,
    runId: stored.run_id,
    parts,
  };
}

class Conversation {
  constructor() {
    this.order = []; // message ids, oldest first
    this.byId = new Map();
    this.live = new Set(); // ids rebuilt from live events (their stored copy is replaced)
    this.toolOwner = new Map(); // tool call id -> message id
    this.current = null; // the assistant message the live run writes into
    this.runError = null;
    this.absorbed = new Map(); // reasoning message id -> the assistant message holding it
    this.removed = []; // ids whose elements the page must drop (absorbed into another)
  }

  prepend(messages) {
    const fresh = messages.filter((m) => !this.byId.has(m.id));
    for (const m of fresh) this.byId.set(m.id, m);
    this.order = [...fresh.map((m) => m.id), ...this.order];
    this.indexTools(fresh);
  }

  append(message) {
    if (!this.byId.has(message.id)) this.order.push(message.id);
    this.byId.set(message.id, message);
    this.indexTools([message]);
  }

  indexTools(messages) {
    for (const m of messages) for (const p of m.parts) if (p.kind === "tool") this.toolOwner.set(p.id, m.id);
  }

  messages() {
    return this.order.map((id) => this.byId.get(id));
  }

  // The message ``id`` as the live run builds it: a stored copy is replaced once, so
  // a run's partly stored message and its replayed events never show twice.
  liveMessage(id, role) {
    if (this.absorbed.has(id)) return this.byId.get(this.absorbed.get(id));
    let message = this.byId.get(id);
    if (!message || !this.live.has(id)) {
      const fresh = { id, role: role || (message && message.role) || "assistant", status: "active", inProgress: true, error: null, parts: [] };
      if (message) this.byId.set(id, fresh);
      else {
        this.append(fresh);
        if (fresh.role === "assistant") this.absorbReasoning(fresh);
      }
      this.live.add(id);
      message = fresh;
    }
    return message;
  }

  // Forget what the store holds of a run about to be replayed from its first event: its
  // events rebuild every message it produced (all but its input), so none shows twice.
  dropRun(runId) {
    for (const id of [...this.order]) {
      const m = this.byId.get(id);
      if (m.runId === runId && m.role !== "user") {
        this.order.splice(this.order.indexOf(id), 1);
        this.byId.delete(id);
      }
    }
  }

  // The store nests a reasoning block into the assistant message that follows it in the
  // same run; the page does the same live, so a reload does not rearrange the turn.
  absorbReasoning(message) {
    const at = this.order.length - 2;
    const previous = at >= 0 ? this.byId.get(this.order[at]) : null;
    if (!previous || previous.role !== "reasoning" || !this.live.has(previous.id)) return;
    if (!previous.parts.every((p) => p.kind === "reasoning")) return;
    message.parts.unshift(...previous.parts);
    this.order.splice(at, 1);
    this.byId.delete(previous.id);
    this.absorbed.set(previous.id, message.id);
    this.removed.push(previous.id);
  }

  // Fold one AG-UI event; returns the ids of the messages it changed.
  apply(event) {
    const t = event.type;
    const changed = [];
    const touch = (m) => {
      changed.push(m.id);
      return m;
    };
    const lastPart = (m, kind) => {
      const last = m.parts[m.parts.length - 1];
      return last && last.kind === kind && last.open ? last : null;
    };
    const textInto = (id, role, delta, kind = "text") => {
      const m = touch(this.liveMessage(id, role));
      let part = lastPart(m, kind);
      if (!part) {
        part = { kind, text: "", open: true };
        m.parts.push(part);
      }
      part.text += delta;
      return m;
    };
    const close = (id, kind) => {
      const m = this.byId.get(id);
      if (!m) return;
      for (const p of m.parts) if (p.kind === kind) p.open = false;
      touch(m);
    };
    switch (t) {
      case "TEXT_MESSAGE_START":
        this.current = touch(this.liveMessage(event.messageId, event.role)).id;
        break;
      case "TEXT_MESSAGE_CONTENT":
      case "TEXT_MESSAGE_CHUNK":
        if (event.delta) textInto(event.messageId || this.current, event.role, event.delta);
        if (event.messageId) this.current = event.messageId;
        break;
      case "TEXT_MESSAGE_END":
        close(event.messageId, "text");
        break;
      case "REASONING_START":
      case "THINKING_START":
        if (event.messageId) touch(this.liveMessage(event.messageId, "reasoning"));
        break;
      case "REASONING_MESSAGE_START":
        touch(this.liveMessage(event.messageId, "reasoning"));
        break;
      case "REASONING_MESSAGE_CONTENT":
      case "REASONING_MESSAGE_CHUNK":
        if (event.delta) textInto(event.messageId, "reasoning", event.delta, "reasoning");
        break;
      case "THINKING_TEXT_MESSAGE_CONTENT":
        if (event.delta && this.current) textInto(this.current, null, event.delta, "reasoning");
        break;
      case "REASONING_MESSAGE_END":
        close(event.messageId, "reasoning");
        break;
      case "REASONING_ENCRYPTED_VALUE": {
        const m = this.byId.get(event.entityId);
        if (m) {
          for (const p of m.parts) if (p.kind === "reasoning") p.encrypted = true;
          touch(m);
        }
        break;
      }
      case "TOOL_CALL_START": {
        const owner = event.parentMessageId || this.current || event.toolCallId;
        const m = touch(this.liveMessage(owner, "assistant"));
        m.parts.push({ kind: "tool", id: event.toolCallId, name: event.toolCallName, args: "", result: null, status: "active" });
        this.toolOwner.set(event.toolCallId, m.id);
        this.current = m.id;
        break;
      }
      case "TOOL_CALL_ARGS":
      case "TOOL_CALL_CHUNK": {
        const part = this.toolPart(event.toolCallId);
        if (part && event.delta) {
          part.args += event.delta;
          changed.push(this.toolOwner.get(event.toolCallId));
        }
        break;
      }
      case "TOOL_CALL_END": {
        const part = this.toolPart(event.toolCallId);
        if (part) changed.push(this.toolOwner.get(event.toolCallId));
        break;
      }
      case "TOOL_CALL_RESULT": {
        const part = this.toolPart(event.toolCallId);
        if (part) {
          part.result = event.content;
          part.status = "complete";
          changed.push(this.toolOwner.get(event.toolCallId));
        }
        break;
      }
      case "CUSTOM": {
        if (event.subagentRunId) break; // a sub-agent's part is not the assistant's
        const value = event.value;
        const isCitation = event.name === "citation";
        // An object with a string id replaces the run's part with the same name and id
        // where it is (nothing new opens: the text streaming goes on).
        const id = !isCitation && value && typeof value === "object" && typeof value.id === "string" ? value.id : undefined;
        for (const owner of id === undefined ? [] : this.live) {
          const held = this.byId.get(owner);
          const same = held && held.parts.find((p) => p.kind === "data" && p.name === event.name && p.id === id);
          if (same) {
            same.payload = value;
            touch(held);
            return changed;
          }
        }
        const m = touch(this.liveMessage(this.current || `custom-${this.order.length}`, "assistant"));
        this.current = m.id;
        for (const p of m.parts) p.open = false; // text after it is a new paragraph
        m.parts.push(isCitation ? { kind: "citation", citation: value } : { kind: "data", name: event.name, id, payload: value });
        break;
      }
      case "RUN_FINISHED":
        changed.push(...this.finishLive(null));
        break;
      case "RUN_ERROR":
        this.runError = { message: event.message, code: event.code, after: this.order[this.order.length - 1] || null };
        changed.push(...this.finishLive(event.code === "CANCELLED" ? "interrupted" : "errored"));
        break;
      default:
        break;
    }
    return changed;
  }

  toolPart(toolCallId) {
    const m = this.byId.get(this.toolOwner.get(toolCallId));
    return m ? m.parts.find((p) => p.kind === "tool" && p.id === toolCallId) : null;
  }

  finishLive(failure) {
    const changed = [];
    for (const id of this.live) {
      const m = this.byId.get(id);
      if (!m || !m.inProgress) continue;
      m.inProgress = false;
      m.status = failure || "complete";
      for (const p of m.parts) {
        p.open = false;
        if (p.kind === "tool" && p.status === "active") p.status = failure || "complete";
      }
      changed.push(id);
    }
    this.current = null;
    return changed;
  }
}

// --- rendering ------------------------------------------------------------------------

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

let markdown = null;

function renderMarkdown(text) {
  if (!markdown) {
    markdown = new window.marked.Marked({ gfm: true, breaks: true });
    // Raw HTML in a message is shown as text: a message is never interpreted as HTML.
    markdown.use({ renderer: { html: (token) => escapeHtml(token.text ?? token.raw ?? "") } });
    window.DOMPurify.addHook("afterSanitizeAttributes", (node) => {
      if (node.tagName === "A") {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer");
      }
    });
  }
  const html = markdown.parse(text, { async: false });
  const box = el("div", { class: "markdown" });
  box.innerHTML = window.DOMPurify.sanitize(html, { USE_PROFILES: { html: true }, FORBID_TAGS: ["style", "form", "input"] });
  return box;
}

function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function prettyJson(text) {
  if (text === null || text === undefined) return "";
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return String(text);
  }
}

function badge(status) {
  if (status === "interrupted") return el("span", { class: "badge interrupted", text: "interrupted" });
  if (status === "errored") return el("span", { class: "badge errored", text: "error" });
  return null;
}

function renderPart(part) {
  if (part.kind === "text") return renderMarkdown(part.text);
  if (part.kind === "reasoning") {
    const body = part.encrypted && !part.text ? el("p", { class: "muted", text: "(encrypted reasoning)" }) : el("p", { class: "reasoning-text", text: part.text });
    return el("details", { class: "reasoning" }, el("summary", { text: part.open ? "Thinking…" : "Reasoning" }), body);
  }
  if (part.kind === "tool") {
    return el(
      "div",
      { class: `tool-card ${part.status || ""}`, role: "group", "aria-label": `Tool call ${part.name}` },
      el("div", { class: "tool-head" }, el("span", { class: "tool-name", text: part.name }), badge(part.status), el("span", { class: "tool-status", text: part.status === "active" ? "running…" : "" })),
      el("div", { class: "tool-label", text: "Arguments" }),
      el("pre", { class: "tool-args", text: prettyJson(part.args) }),
      part.result !== null && part.result !== undefined ? el("div", { class: "tool-label", text: "Result" }) : null,
      part.result !== null && part.result !== undefined ? el("pre", { class: "tool-result", text: prettyJson(part.result) }) : null,
      part.error ? el("p", { class: "error", text: part.error }) : null,
    );
  }
  if (part.kind === "data") {
    return el(
      "div",
      { class: "data-card", role: "group", "aria-label": `Data ${part.name}` },
      el("div", { class: "tool-head" }, el("span", { class: "data-name", text: part.name })),
      el("pre", { class: "data-payload", text: JSON.stringify(part.payload, null, 2) ?? "" }),
    );
  }
  if (part.kind === "citation") return renderCitation(part.citation);
  return null;
}

// A citation with an http(s) ``url`` is a link (its ``title`` as the text); anything else
// the producer sent is shown as JSON.
function renderCitation(citation) {
  const url = citation && typeof citation === "object" ? citation.url : null;
  const linked = typeof url === "string" && /^https?:\/\//i.test(url);
  const source = linked
    ? el("a", { href: url, target: "_blank", rel: "noopener noreferrer", text: typeof citation.title === "string" && citation.title ? citation.title : url })
    : el("code", { text: JSON.stringify(citation) ?? "" });
  return el("p", { class: "citation" }, el("span", { class: "muted", text: "Source: " }), source);
}

function renderMessage(message) {
  const roleLabel = { user: "You", assistant: "Assistant", reasoning: "Assistant", tool: "Tool", activity: "Activity", developer: "Developer", system: "System" }[message.role] || message.role;
  const node = el(
    "article",
    { class: `message ${message.role}`, "data-id": message.id, "data-status": message.status, "aria-label": `${roleLabel} message` },
    el("div", { class: "message-head" }, el("span", { class: "who", text: roleLabel }), badge(message.status), message.inProgress ? el("span", { class: "typing", text: "…" }) : null),
  );
  const body = el("div", { class: "message-body" });
  if (message.role === "tool") {
    body.append(el("pre", { class: "tool-result", text: prettyJson(message.parts.map((p) => p.text || "").join("")) }));
  } else {
    for (const part of message.parts) {
      const rendered = renderPart(part);
      if (rendered) body.append(rendered);
    }
  }
  node.append(body);
  if (message.error) node.append(el("p", { class: "error", text: message.error }));
  const actions = messageActions(message);
  if (actions) node.append(actions);
  return node;
}

// Branch controls of a stored message: its versions ("‹ 2/3 ›"), edit, regenerate, fork.
function messageActions(message) {
  if (!message.uuid || !page.chat) return null;
  const bar = el("div", { class: "message-actions" });
  const place = page.branches[message.uuid];
  if (place) {
    const to = (step) => () => switchTo(place.siblings[place.index + step]);
    bar.append(
      el("button", { type: "button", class: "version-prev", "aria-label": "Previous version", disabled: place.index === 0 ? "" : null, onclick: to(-1), text: "‹" }),
      el("span", { class: "version", text: `${place.index + 1}/${place.count}` }),
      el("button", { type: "button", class: "version-next", "aria-label": "Next version", disabled: place.index === place.count - 1 ? "" : null, onclick: to(1), text: "›" }),
    );
  }
  if (message.role === "user") bar.append(el("button", { type: "button", class: "edit", onclick: () => editMessage(message), text: "Edit" }));
  if (message.role === "assistant") bar.append(el("button", { type: "button", class: "regenerate", onclick: () => regenerate(message), text: "Regenerate" }));
  bar.append(el("button", { type: "button", class: "fork", onclick: () => forkAt(message), text: "Fork" }));
  return bar;
}

// --- the page -------------------------------------------------------------------------

const page = {
  chats: [],
  cursor: undefined, // undefined: not loaded yet; null: no more pages
  loadingChats: false,
  query: "",
  hitsCursor: null, // next_cursor of the last page of message hits
  thread: null, // the open thread id
  chat: null, // its stored chat (null until the first run stores it)
  conversation: new Conversation(),
  before: null, // cursor of the older history page (null: none)
  loadingOlder: false,
  run: null, // { runId, lastId, controller }
  following: null, // the promise of the run openThread follows, if any
  branches: {}, // message uuid -> { index, count, siblings } of the loaded pages
  summaries: [], // the chat's summaries whose span ends in a loaded page, newest first
  generation: 0, // bumped whenever another chat opens, so stale work is dropped
};

function toast(message) {
  const box = $("toast");
  box.textContent = message;
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (box.hidden = true), 6000);
}

function report(error) {
  console.error(error);
  toast(error instanceof ApiError ? error.message : `Something went wrong: ${error.message || error}`);
}

let tokenPrompt = null;

function askForToken(errorText) {
  if (tokenPrompt) return tokenPrompt;
  const dialog = $("token-dialog");
  const error = $("token-error");
  error.hidden = !errorText;
  error.textContent = errorText || "";
  $("token-input").value = "";
  tokenPrompt = new Promise((resolve) => {
    const onSubmit = (e) => {
      e.preventDefault();
      const value = $("token-input").value.trim();
      if (!value) return;
      token = value;
      sessionStorage.setItem(TOKEN_KEY, token);
      $("token-form").removeEventListener("submit", onSubmit);
      dialog.close();
      tokenPrompt = null;
      resolve();
    };
    $("token-form").addEventListener("submit", onSubmit);
  });
  if (!dialog.open) dialog.showModal();
  $("token-input").focus();
  return tokenPrompt;
}

function confirmAction(text, okLabel) {
  const dialog = $("confirm-dialog");
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = okLabel;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true }));
}

// Ask for a line of text in one of the page's dialogs: the trimmed text, or null if cancelled.
function askInDialog(dialogId, inputId, current) {
  const dialog = $(dialogId);
  $(inputId).value = current || "";
  dialog.returnValue = "";
  dialog.showModal();
  $(inputId).select();
  return new Promise((resolve) =>
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok" ? $(inputId).value.trim() : null), { once: true }),
  );
}

function askForName(current) {
  return askInDialog("rename-dialog", "rename-input", current);
}

function chatTitle(chat) {
  return (chat && (chat.name || chat.thread_id)) || "New chat";
}

// --- the chat list ----------------------------------------------------------------------

function renderChatItem(chat) {
  const last = chat.last_message;
  const preview = last ? (last.content || (last.tool_calls && last.tool_calls.length ? `🔧 ${last.tool_calls[0].name}` : "")) : "";
  const link = el(
    "a",
    { href: `#/t/${encodeURIComponent(chat.thread_id)}`, class: "chat-link", "aria-current": chat.thread_id === page.thread ? "page" : null },
    el("span", { class: "chat-name", text: chatTitle(chat) }),
    el("span", { class: "chat-preview", text: preview.slice(0, 120) }),
  );
  return el("li", { "data-thread": chat.thread_id }, link);
}

// The list only grows by pages: new items are appended, never the whole list redrawn.
function renderChatList(added = null) {
  const list = $("chat-list");
  if (added === null) list.replaceChildren(...page.chats.map(renderChatItem));
  else list.append(...added.map(renderChatItem));
  const status = $("list-status");
  if (page.cursor === null && page.chats.length === 0) status.textContent = page.query ? "No chat has that name." : "No chats yet.";
  else status.textContent = "";
}

function markOpenChat() {
  for (const link of $("chat-list").querySelectorAll("a")) {
    const current = link.parentElement.dataset.thread === page.thread;
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

let listGeneration = 0;

// --- usage: tokens and cost of the open chat and of all mine (GET /api/usage) ----------

const usage = { byChat: new Map(), total: null };

function usageText(t) {
  const tokens = (t.input_tokens + t.output_tokens).toLocaleString();
  const saved = t.cache_savings_usd ? ` (caches saved $${t.cache_savings_usd.toFixed(4)})` : "";
  return `${tokens} tokens · $${t.cost_usd.toFixed(4)}${saved}`;
}

async function showUsage() {
  try {
    const reply = await api("GET", "/api/usage?by=chat");
    usage.byChat = new Map(reply.totals.map((t) => [t.chat_uuid, t]));
    usage.total = reply.total;
  } catch (error) {
    return; // the usage lines are extras: a failed read leaves them as they were
  }
  renderUsage();
}

function renderUsage() {
  const total = usage.total;
  $("usage-total").textContent = total && total.runs ? `All chats: ${usageText(total)}` : "";
  const line = $("chat-usage");
  const mine = page.chat && usage.byChat.get(page.chat.chat_uuid);
  line.hidden = !mine;
  line.textContent = mine ? `This chat: ${usageText(mine)} in ${mine.runs} run(s)` : "";
}

async function loadChats(reset = false) {
  if (reset) showUsage();
  if (reset) {
    // A reset wins over a page still on its way: that page is dropped when it lands.
    listGeneration += 1;
    page.chats = [];
    page.cursor = undefined;
    page.loadingChats = false;
  }
  if (page.loadingChats || page.cursor === null) return;
  page.loadingChats = true;
  const generation = listGeneration;
  try {
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (page.cursor) params.set("cursor", page.cursor);
    if (page.query) params.set("q", page.query);
    const result = await api("GET", `/api/chats?${params}`);
    if (generation !== listGeneration) return;
    const first = page.chats.length === 0;
    page.chats.push(...result.items);
    page.cursor = result.next_cursor;
    renderChatList(first ? null : result.items);
    markOpenChat();
  } catch (error) {
    report(error);
  } finally {
    if (generation === listGeneration) page.loadingChats = false;
  }
  // Keep loading while the sentinel is still visible (a tall screen, a short page).
  if (generation === listGeneration && page.cursor && sentinelVisible()) loadChats();
}

// --- search in messages ------------------------------------------------------------------

let hitsGeneration = 0;

// The messages holding every word of the query, a page at a time (``more``: the next one).
async function searchMessages(more = false) {
  const box = $("search-results");
  const generation = more ? hitsGeneration : ++hitsGeneration;
  if (!page.query) {
    box.hidden = true;
    $("search-hits").replaceChildren();
    return;
  }
  const params = new URLSearchParams({ q: page.query, limit: "20" });
  if (more && page.hitsCursor) params.set("cursor", page.hitsCursor);
  try {
    const result = await api("GET", `/api/search?${params}`);
    if (generation !== hitsGeneration) return;
    page.hitsCursor = result.next_cursor;
    const items = result.items.map(renderHit);
    if (more) $("search-hits").append(...items);
    else $("search-hits").replaceChildren(...items);
    $("hits-status").textContent = !more && !result.items.length ? "No message has those words." : "";
    $("hits-more").hidden = !result.next_cursor;
    box.hidden = false;
  } catch (error) {
    if (generation !== hitsGeneration) return;
    if (error.status !== 422) return report(error);
    // A query with no words (or too many): say why instead of listing nothing.
    $("search-hits").replaceChildren();
    $("hits-status").textContent = error.message;
    $("hits-more").hidden = true;
    box.hidden = false;
  }
}

// A hit: its chat, and its snippet with the matching words marked (built as text nodes,
// never as HTML).
function renderHit(hit) {
  const snippet = el("span", { class: "hit-snippet" });
  let at = 0;
  for (const [start, end] of hit.highlights) {
    snippet.append(hit.snippet.slice(at, start), el("mark", { text: hit.snippet.slice(start, end) }));
    at = end;
  }
  snippet.append(hit.snippet.slice(at));
  const kind = { tool: "🔧 ", reasoning: "💭 " }[hit.kind] || "";
  const link = el(
    "a",
    { href: `#/t/${encodeURIComponent(hit.thread_id)}`, class: "chat-link hit-link", "data-message": hit.message_uuid },
    el("span", { class: "chat-name", text: hit.chat_name || hit.thread_id }),
    el("span", { class: "chat-preview" }, kind, snippet),
  );
  return el("li", { "data-thread": hit.thread_id }, link);
}

function sentinelVisible() {
  const rect = $("list-sentinel").getBoundingClientRect();
  const box = $("sidebar").getBoundingClientRect();
  return rect.top < box.bottom + 200;
}

// --- a chat ---------------------------------------------------------------------------

function renderConversation() {
  const box = $("messages");
  const nodes = [];
  // A summary sits after the last message it stands for: the agent gets it instead of them.
  const ends = new Map(page.summaries.map((s) => [s.last_message_uuid, s]).reverse());
  for (const message of page.conversation.messages()) {
    if (message.role !== "system") nodes.push(renderMessage(message));
    const summary = message.uuid && ends.get(message.uuid);
    if (summary) nodes.push(renderSummary(summary));
  }
  box.replaceChildren(...nodes);
  renderRunError();
}

function renderSummary(summary) {
  return el(
    "aside",
    { class: "summary", "data-summary": summary.summary_uuid, "aria-label": "Summary" },
    el("details", {},
      el("summary", { text: `Summary of the ${summary.message_count} message(s) above: what the agent now gets instead of them` }),
      el("p", { class: "summary-text", text: summary.content }),
    ),
    el("button", { type: "button", class: "uncompact", onclick: () => removeSummary(summary), text: "Undo" }),
  );
}

function addSummaries(found) {
  const known = new Set(page.summaries.map((s) => s.summary_uuid));
  page.summaries.push(...(found || []).filter((s) => !known.has(s.summary_uuid)));
  page.summaries.sort((a, b) => (a.created_at < b.created_at ? 1 : -1));
}

function renderRunError() {
  const old = $("messages").querySelector(".run-error");
  if (old) old.remove();
  const failure = page.conversation.runError;
  if (!failure) return;
  const node = el("p", { class: "run-error error", role: "status", text: failure.code === "CANCELLED" ? "Stopped." : `The run failed: ${failure.message}` });
  const after = failure.after && $("messages").querySelector(`[data-id="${CSS.escape(failure.after)}"]`);
  if (after) after.after(node);
  else $("messages").append(node);
}

function updateMessages(ids) {
  const box = $("messages");
  const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  for (const id of page.conversation.removed.splice(0)) {
    const gone = box.querySelector(`[data-id="${CSS.escape(id)}"]`);
    if (gone) gone.remove();
  }
  for (const id of new Set(ids)) {
    const message = page.conversation.byId.get(id);
    if (!message) continue;
    const fresh = renderMessage(message);
    const old = box.querySelector(`[data-id="${CSS.escape(id)}"]`);
    // Keep reasoning the reader opened open while it streams.
    if (old) {
      const opened = [...old.querySelectorAll("details")].map((d) => d.open);
      fresh.querySelectorAll("details").forEach((d, i) => (d.open = Boolean(opened[i])));
      old.replaceWith(fresh);
    } else {
      box.append(fresh);
    }
  }
  renderRunError();
  if (nearBottom) box.scrollTop = box.scrollHeight;
}

function setChatHeader() {
  $("chat-title").textContent = chatTitle(page.chat || (page.thread ? { thread_id: page.thread } : null));
  for (const id of ["rename", "compact", "export", "delete"]) $(id).disabled = !page.chat;
  const lineage = $("lineage");
  const from = page.chat && page.chat.forked_from_chat_uuid;
  lineage.hidden = !from;
  lineage.textContent = from ? `Forked from chat ${from}` : "";
  renderUsage();
}

function setRunning(running) {
  $("stop").hidden = !running;
  $("send").hidden = running;
}

async function openThread(threadId) {
  const generation = ++page.generation;
  stopFollowing();
  page.thread = threadId;
  page.chat = null;
  page.conversation = new Conversation();
  page.before = null;
  page.branches = {};
  page.summaries = [];
  page.following = null;
  $("app").dataset.view = "chat";
  setRunning(false);
  renderConversation();
  setChatHeader();
  markOpenChat();
  if (!threadId) return;
  let info = null;
  try {
    info = await api("GET", `/api/threads/${encodeURIComponent(threadId)}`);
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) report(error);
  }
  if (generation !== page.generation || !info) return;
  page.chat = info.chat;
  setChatHeader();
  if (page.chat) {
    const result = await api("GET", `/api/chats/${page.chat.chat_uuid}/messages?newest=true&limit=${PAGE_SIZE}`);
    if (generation !== page.generation) return;
    Object.assign(page.branches, result.branches || {});
    addSummaries(result.summaries);
    page.conversation.prepend(result.items.map(messageFromStored));
    page.before = result.prev_cursor;
    renderConversation();
    $("messages").scrollTop = $("messages").scrollHeight;
  }
  if (info.live_run_ids.length) {
    page.conversation.dropRun(info.live_run_ids[0]);
    renderConversation();
    page.following = follow(threadId, info.live_run_ids[0], 0, generation);
  }
}

async function loadOlder() {
  if (!page.chat || page.before === null || page.loadingOlder) return;
  page.loadingOlder = true;
  const generation = page.generation;
  try {
    const result = await api("GET", `/api/chats/${page.chat.chat_uuid}/messages?before=${page.before}&limit=${PAGE_SIZE}`);
    if (generation !== page.generation) return;
    const box = $("messages");
    const fromBottom = box.scrollHeight - box.scrollTop;
    Object.assign(page.branches, result.branches || {});
    addSummaries(result.summaries);
    page.conversation.prepend(result.items.map(messageFromStored));
    page.before = result.prev_cursor;
    renderConversation();
    box.scrollTop = box.scrollHeight - fromBottom;
  } catch (error) {
    report(error);
  } finally {
    page.loadingOlder = false;
  }
}

// --- runs -----------------------------------------------------------------------------

function stopFollowing() {
  if (page.run && page.run.controller) page.run.controller.abort();
  page.run = null;
}

// Read one response's frames into the conversation; true once the run ended.
async function consume(response, run, generation) {
  let pending = [];
  let scheduled = false;
  const flush = () => {
    scheduled = false;
    if (generation === page.generation) updateMessages(pending);
    pending = [];
  };
  for await (const { id, event } of sseFrames(response, run.controller.signal)) {
    if (generation !== page.generation) return true;
    if (id !== null) run.lastId = id;
    if (event.type === "RUN_STARTED" && event.runId) run.runId = event.runId;
    pending.push(...page.conversation.apply(event));
    if (!scheduled) {
      scheduled = true;
      requestAnimationFrame(flush);
    }
    if (event.type === "RUN_FINISHED" || event.type === "RUN_ERROR") {
      flush();
      return true;
    }
  }
  flush();
  return false;
}

// Follow a run until it ends, resuming after the last event id whenever the stream drops.
async function follow(threadId, runId, after, generation, firstResponse = null, controller = new AbortController()) {
  const run = { runId, lastId: after, controller };
  page.run = run;
  setRunning(true);
  let response = firstResponse;
  let attempt = 0;
  try {
    while (generation === page.generation) {
      try {
        if (!response) {
          const path = `/agui/threads/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(run.runId)}/events`;
          response = await send(path, { headers: { "Last-Event-ID": String(run.lastId), Accept: "text/event-stream" }, signal: run.controller.signal });
        }
        const before = run.lastId;
        if (await consume(response, run, generation)) break;
        if (run.lastId > before) attempt = 0;
      } catch (error) {
        if (run.controller.signal.aborted) return;
        if (error instanceof ApiError && error.status === 404) {
          // The run ended and left the resume window: what it stored is the truth.
          await openThread(threadId);
          return;
        }
        if (error instanceof ApiError && error.status < 500) throw error;
      }
      response = null;
      if (attempt >= RECONNECT_DELAYS_MS.length) throw new Error("lost the connection to the server");
      await new Promise((resolve) => setTimeout(resolve, RECONNECT_DELAYS_MS[attempt++]));
      // Wait for the network instead of spinning while the browser is offline.
      if (!navigator.onLine) await new Promise((resolve) => window.addEventListener("online", resolve, { once: true }));
    }
  } catch (error) {
    report(error);
  } finally {
    if (page.run === run) {
      page.run = null;
      // The page shows the run as stored (its branch controls, final statuses) before it
      // offers to send again.
      if (generation === page.generation) await refreshChat(threadId, generation, run.runId);
      if (!page.run) setRunning(false);
    }
  }
}

// After a run: pick up the stored chat (its uuid on a first run, its new name), the run's
// messages as stored, and the list. A run's last records are written just after its
// terminal event reached the page, so this waits (briefly) until it is no longer live.
async function refreshChat(threadId, generation, runId = null) {
  try {
    const lookup = () => api("GET", `/api/threads/${encodeURIComponent(threadId)}`);
    let info = await lookup();
    for (let wait = 50; runId && info.live_run_ids.includes(runId) && wait <= 3200; wait *= 2) {
      await new Promise((resolve) => setTimeout(resolve, wait));
      if (generation !== page.generation) return;
      info = await lookup();
    }
    if (generation !== page.generation) return;
    page.chat = info.chat;
    setChatHeader();
    if (page.chat && !page.run) await reloadNewest(generation);
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) report(error);
  }
  loadChats(true);
}

// Show the newest page of the stored chat again (keeping a run's error where it showed).
async function reloadNewest(generation) {
  const result = await api("GET", `/api/chats/${page.chat.chat_uuid}/messages?newest=true&limit=${PAGE_SIZE}`);
  if (generation !== page.generation || page.run) return;
  const runError = page.conversation.runError;
  page.conversation = new Conversation();
  page.conversation.runError = runError;
  page.branches = { ...(result.branches || {}) };
  page.conversation.prepend(result.items.map(messageFromStored));
  page.before = result.prev_cursor;
  renderConversation();
  $("messages").scrollTop = $("messages").scrollHeight;
}

function newId(prefix) {
  return `${prefix}-${crypto.randomUUID()}`;
}

async function sendMessage(text) {
  if (!page.thread) {
    page.thread = newId("chat");
    history.replaceState(null, "", `#/t/${encodeURIComponent(page.thread)}`);
  }
  const generation = page.generation;
  const threadId = page.thread;
  const runId = newId("run");
  const message = { id: newId("msg"), role: "user", content: text };
  page.conversation.runError = null;
  page.conversation.append({ id: message.id, role: "user", status: "complete", parts: [{ kind: "text", text }], error: null });
  updateMessages([message.id]);
  const body = { threadId, runId, messages: [message], state: {}, tools: [], context: [], forwardedProps: {} };
  const controller = new AbortController();
  // No second send while the server sets the run up (its answer comes once the run holds
  // the thread).
  setRunning(true);
  let response;
  try {
    response = await send("/agui", { method: "POST", headers: { "Content-Type": "application/json", Accept: "text/event-stream" }, body: JSON.stringify(body), signal: controller.signal });
  } catch (error) {
    setRunning(false);
    report(error);
    return;
  }
  if (generation !== page.generation) return;
  // ``follow`` owns the stream from here, resuming it if the connection drops.
  await follow(threadId, runId, 0, generation, response, controller);
}

// A button's action on the open chat: nothing when none is open, and a failure is
// reported on the page rather than thrown.
function chatAction(work) {
  return async (...args) => {
    if (!page.chat) return;
    try {
      await work(...args);
    } catch (error) {
      report(error);
    }
  };
}

// --- branches -------------------------------------------------------------------------

async function switchTo(messageUuid) {
  if (!page.chat || page.run || !messageUuid) return;
  try {
    await api("POST", `/api/chats/${page.chat.chat_uuid}/switch`, { message_uuid: messageUuid });
  } catch (error) {
    report(error);
    return;
  }
  await openThread(page.thread);
}

// Start a run on a new branch (regenerate, edit), show it as it streams, then show the
// chat as stored (with the ids and versions the branch controls need).
async function branchRun(route, body) {
  if (!page.chat || page.run) return;
  const threadId = page.thread;
  try {
    await api("POST", `/api/chats/${page.chat.chat_uuid}/${route}`, body);
  } catch (error) {
    report(error);
    return;
  }
  await openThread(threadId);
  if (page.following) await page.following;
  if (page.thread === threadId) await openThread(threadId);
}

function regenerate(message) {
  return branchRun("regenerate", { message_uuid: message.uuid });
}

async function editMessage(message) {
  if (!page.chat || page.run) return;
  const current = message.parts.filter((p) => p.kind === "text").map((p) => p.text).join("");
  const text = await askForText(current);
  if (text) await branchRun("edit", { message_uuid: message.uuid, content: text });
}

const forkAt = chatAction(async (message) => {
  const fork = await api("POST", `/api/chats/${page.chat.chat_uuid}/fork`, { message_uuid: message.uuid });
  location.hash = `#/t/${encodeURIComponent(fork.thread_id)}`;
  loadChats(true);
});

function askForText(current) {
  return askInDialog("edit-dialog", "edit-input", current);
}

async function stopRun() {
  const run = page.run;
  if (!run || !page.thread) return;
  try {
    await api("POST", `/agui/threads/${encodeURIComponent(page.thread)}/runs/${encodeURIComponent(run.runId)}/cancel`);
  } catch (error) {
    report(error);
  }
}

// --- actions ----------------------------------------------------------------------------

const renameChat = chatAction(async () => {
  const name = await askForName(page.chat.name || "");
  if (!name) return;
  page.chat = await api("PATCH", `/api/chats/${page.chat.chat_uuid}`, { name });
  setChatHeader();
  loadChats(true);
});

const compactChat = chatAction(async () => {
  const result = await api("POST", `/api/chats/${page.chat.chat_uuid}/compact`, {});
  toast(result.summary ? `Summarized ${result.summary.message_count} message(s) for the agent; every message stays here.` : "Nothing to compact yet.");
  await loadSummaries();
});

const removeSummary = chatAction(async (summary) => {
  await api("DELETE", `/api/chats/${page.chat.chat_uuid}/summaries/${summary.summary_uuid}`);
  toast("Summary removed: the agent gets those messages again.");
  await loadSummaries();
});

async function loadSummaries() {
  const generation = page.generation;
  const found = await api("GET", `/api/chats/${page.chat.chat_uuid}/summaries`);
  if (generation !== page.generation) return;
  page.summaries = found;
  renderConversation();
}

const deleteChat = chatAction(async () => {
  const ok = await confirmAction(`Delete “${chatTitle(page.chat)}” and all its messages? This cannot be undone.`, "Delete");
  if (!ok) return;
  await api("DELETE", `/api/chats/${page.chat.chat_uuid}`);
  location.hash = "";
  loadChats(true);
});

const exportChat = chatAction(async () => {
  const response = await send(`/api/chats/${page.chat.chat_uuid}/export`);
  const blob = await response.blob();
  const link = el("a", { href: URL.createObjectURL(blob), download: `${(page.chat.name || page.chat.thread_id).replace(/[^\w.-]+/g, "_")}.json` });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
});

async function importChat(file) {
  try {
    const text = await file.text();
    let chat;
    try {
      chat = await api("POST", "/api/chats/import", text);
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 409)) throw error;
      // The thread id is taken: import it as a copy under a new one.
      chat = await api("POST", `/api/chats/import?thread_id=${encodeURIComponent(newId("import"))}`, text);
    }
    await loadChats(true);
    location.hash = `#/t/${encodeURIComponent(chat.thread_id)}`;
  } catch (error) {
    report(error);
  }
}

// --- wiring ---------------------------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/t\/(.+)$/);
  const thread = match ? decodeURIComponent(match[1]) : null;
  if (thread !== page.thread || !match) openThread(thread);
  if (!match) $("app").dataset.view = "list";
}

function start() {
  $("skip").addEventListener("click", (e) => {
    e.preventDefault();
    $("composer-input").focus();
  });
  $("composer").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = $("composer-input");
    const text = input.value.trim();
    if (!text || page.run) return;
    input.value = "";
    sendMessage(text);
  });
  $("composer-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", stopRun);
  $("new-chat").addEventListener("click", () => {
    location.hash = `#/t/${encodeURIComponent(newId("chat"))}`;
    $("composer-input").focus();
  });
  $("back").addEventListener("click", () => ($("app").dataset.view = "list"));
  $("rename").addEventListener("click", renameChat);
  $("compact").addEventListener("click", compactChat);
  $("delete").addEventListener("click", deleteChat);
  $("export").addEventListener("click", exportChat);
  $("import").addEventListener("click", () => $("import-file").click());
  $("import-file").addEventListener("change", (e) => {
    const [file] = e.target.files;
    if (file) importChat(file);
    e.target.value = "";
  });
  let searchTimer = null;
  $("search").addEventListener("input", (e) => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      page.query = e.target.value.trim();
      loadChats(true);
      searchMessages();
    }, 200);
  });
  $("hits-more").addEventListener("click", () => searchMessages(true));
  new IntersectionObserver((entries) => entries.some((e) => e.isIntersecting) && loadChats(), { root: $("sidebar"), rootMargin: "0px 0px 300px 0px" }).observe($("list-sentinel"));
  $("messages").addEventListener("scroll", () => {
    if ($("messages").scrollTop < 40) loadOlder();
  });
  window.addEventListener("hashchange", route);
  loadChats(true);
  route();
}

start();
