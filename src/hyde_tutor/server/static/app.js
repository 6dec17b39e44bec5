// The tutor's chat page. Everything from the server (model text, corpus entries) is written with
// textContent: it is shown as text, never parsed as markup.
"use strict";

function hex(bytes) { return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(""); }
function newId() { return hex(crypto.getRandomValues(new Uint8Array(12))); }
function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}
function plain(text) { return String(text).replace(/\*\*/g, ""); }

// The chat id outlives a reload (the stored conversation is shown again); "Новый разговор" starts another.
const CHAT_KEY = "hydeChatId";
let chatId = localStorage.getItem(CHAT_KEY);
if (!chatId || !/^[A-Za-z0-9_-]{1,64}$/.test(chatId)) {
  chatId = newId();
  localStorage.setItem(CHAT_KEY, chatId);
}
const operatorMatch = location.hash.match(/operator=([^&]+)/);
if (operatorMatch) {
  sessionStorage.setItem("hydeOperator", decodeURIComponent(operatorMatch[1]));
  history.replaceState(null, "", location.pathname);
}
const operatorToken = sessionStorage.getItem("hydeOperator");

function showCards(box, entries) {
  box.replaceChildren();
  for (const entry of entries) {
    const card = el("div", "card");
    card.dataset.id = entry.id;
    card.append(el("div", "pattern", entry.pattern), el("div", "name", entry.name));
    for (const ex of entry.examples || []) {
      const line = el("div", "example");
      line.append(el("span", "ko", ex.ko), document.createTextNode(ex.ru ? " — " + ex.ru : ""));
      card.append(line);
    }
    if (!entry.examples || !entry.examples.length) card.append(el("div", "text", entry.text));
    box.append(card);
  }
}

function showOperator(box, view) {
  const state = view.running ? "идёт" : "остановлен";
  const lines = ["оператор: группа " + view.arm + (view.experiment ? " (эксперимент " + view.experiment + " " + state + ")" : "")];
  for (const s of view.searches || []) lines.push(s.tool + ": " + s.why + ", " + s.results + " рез., " + s.ms + " мс");
  for (const h of view.hypotheses || []) lines.push("гипотеза (" + h.source + "): " + h.text);
  box.textContent = lines.join("\n");
  box.hidden = false;
}

// A thumb drawn inline (no emoji font needed: a browser without one showed a box).
function thumb(down) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("width", "16");
  svg.setAttribute("height", "16");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", down ? "icon down" : "icon");
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", "M2 7h3v8H2zM6 7l3-6c1.2 0 2 .8 2 2v3h3.2c.9 0 1.5.8 1.3 1.7l-1.2 5.6c-.2.9-.9 1.7-1.8 1.7H6z");
  path.setAttribute("fill", "currentColor");
  svg.append(path);
  return svg;
}

function rateButton(cls, label, down) {
  const button = el("button", cls);
  button.append(thumb(down), document.createTextNode(" " + label));
  return button;
}

// `given`: the learner's earlier rating of this turn (a reloaded page), { rating: 1 | -1, reason }.
function ratingBar(turnId, given) {
  const bar = el("div", "rate");
  const up = rateButton("rate-up", "Помогло", false), down = rateButton("rate-down", "Не помогло", true);
  up.type = down.type = "button";
  up.title = "Полезный ответ"; down.title = "Ответ не помог";
  const reason = el("input", "reason");
  reason.maxLength = 300;
  reason.placeholder = "Почему? (необязательно, одна строка)";
  const done = el("span", "rated");
  async function rate(value, button) {
    const response = await fetch("/api/rating", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ turn_id: turnId, rating: value, reason: reason.value.trim() || null }),
    });
    if (response.ok) {
      up.setAttribute("aria-pressed", String(button === up));
      down.setAttribute("aria-pressed", String(button === down));
      done.textContent = "Спасибо, оценка сохранена";
    } else {
      done.textContent = "Оценка не сохранена: " + ((await response.json().catch(() => ({}))).error || response.status);
    }
  }
  if (given && (given.rating === 1 || given.rating === -1)) {
    up.setAttribute("aria-pressed", String(given.rating === 1));
    down.setAttribute("aria-pressed", String(given.rating === -1));
    reason.value = given.reason || "";
    done.textContent = "Оценка сохранена";
  }
  up.addEventListener("click", () => rate(1, up));
  down.addEventListener("click", () => rate(-1, down));
  bar.append(up, down, reason, done);
  return bar;
}

// The conversation stored for this chat (the learner's own, by the cookie), shown again after a reload.
async function restore() {
  const response = await fetch("/api/chat/" + encodeURIComponent(chatId) + "/messages");
  if (!response.ok) return;
  const log = document.getElementById("log");
  for (const m of (await response.json()).messages || []) {
    if (m.role === "learner") log.append(el("div", "msg learner", m.text));
    else {
      const msg = el("div", "msg tutor");
      msg.append(el("div", "reply", plain(m.text)));
      if (m.turn_id) {  // a served reply can still be rated after a reload
        msg.dataset.turnId = m.turn_id;
        msg.append(ratingBar(m.turn_id, m));
      }
      log.append(msg);
    }
  }
  if (log.lastElementChild) log.lastElementChild.scrollIntoView({ block: "end" });
}

async function ask(text) {
  const log = document.getElementById("log");
  log.append(el("div", "msg learner", text));
  const msg = el("div", "msg tutor");
  const reply = el("div", "reply waiting");
  const cards = el("div", "cards");
  const operator = el("div", "operator");
  operator.hidden = true;
  msg.append(reply, cards, operator);
  log.append(msg);
  const headers = { "Content-Type": "application/json" };
  if (operatorToken) headers["Authorization"] = "Bearer " + operatorToken;
  const body = { id: chatId, trigger: "submit-message",
                 messages: [{ id: newId(), role: "user", parts: [{ type: "text", text }] }] };
  const response = await fetch("/api/chat", { method: "POST", headers, body: JSON.stringify(body) });
  if (!response.ok) {
    const problem = await response.json().catch(() => ({}));
    reply.classList.remove("waiting");
    reply.textContent = "Не получилось: " + (problem.error || response.status);
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", streamed = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.type === "text-delta") {
        streamed += chunk.delta;
        reply.classList.remove("waiting");
        reply.textContent = plain(streamed);
      } else if (chunk.type === "data-entries") {
        showCards(cards, chunk.data.entries);
        if (chunk.data.operator) showOperator(operator, chunk.data.operator);
      } else if (chunk.type === "data-reply") {
        reply.classList.remove("waiting");
        reply.textContent = plain(chunk.data.text);
        msg.dataset.turnId = chunk.data.turn_id;
        msg.append(ratingBar(chunk.data.turn_id));
        if (chunk.data.operator) showOperator(operator, chunk.data.operator);
      }
    }
  }
  msg.scrollIntoView({ block: "end" });
}

document.addEventListener("DOMContentLoaded", () => {
  restore().catch(() => {});
  document.getElementById("new-chat").addEventListener("click", () => {
    chatId = newId();
    localStorage.setItem(CHAT_KEY, chatId);
    document.getElementById("log").replaceChildren();
  });
  const form = document.getElementById("ask");
  const input = document.getElementById("question");
  const send = document.getElementById("send");
  const notice = document.getElementById("notice");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    input.value = "";
    send.disabled = true;
    notice.textContent = "";
    try {
      await ask(text);
    } catch (error) {
      notice.textContent = "Связь с сервером прервалась: " + error;
    } finally {
      send.disabled = false;
      input.focus();
    }
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); form.requestSubmit(); }
  });
});
