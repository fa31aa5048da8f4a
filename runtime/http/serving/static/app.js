// The page of `wgc run --serve` (runtime/http/serving/page.py): a form for each route the served plan has,
// read from GET /v1/models. Plain JavaScript, no build step, nothing fetched but from this server.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);
const page = { model: null, chat: [], connects: 0 };

function headers(json) {
  const out = json ? { "Content-Type": "application/json" } : {};
  const key = $("#api-key").value.trim();
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

// The server's error as one line: OpenAI's {"error": {"message", "code"}}, else the status and body.
async function errorText(response) {
  const text = await response.text();
  try {
    const err = JSON.parse(text).error;
    if (err && err.message) return `${response.status} ${err.code || err.type || "error"}: ${err.message}`;
  } catch (_) { /* not JSON: shown as it is */ }
  return `${response.status} ${response.statusText}: ${text.slice(0, 500)}`;
}

function showError(box, message) {
  box.textContent = message || "";
  box.hidden = !message;
}

function say(section, text) {
  $(".status", section).textContent = text;
}

function paramsOf(section) {
  const raw = $("[name=params]", section).value.trim();
  if (!raw) return undefined;
  let value;
  try { value = JSON.parse(raw); } catch (err) { throw new Error(`params: not JSON (${err.message})`); }
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("params: a JSON object");
  return value;
}

async function post(path, body) {
  const response = await fetch(path, { method: "POST", headers: headers(true), body: JSON.stringify(body) });
  if (!response.ok) throw new Error(await errorText(response));
  return response;
}

// A form's submit handler: its work runs with the button disabled; any error is shown as text.
function onSubmit(section, work) {
  $("form", section).addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = $("button[type=submit]", section);
    button.disabled = true;
    showError($(".error", section), "");
    try {
      await work();
    } catch (err) {
      showError($(".error", section), err.message || String(err));
    } finally {
      button.disabled = false;
    }
  });
}

function seconds(t0) {
  return `${((performance.now() - t0) / 1000).toFixed(2)} s`;
}

// ---- the model card ------------------------------------------------------------------------------

async function connect() {
  const box = $("#model-error");
  const mine = ++page.connects;  // an older answer that comes late is dropped
  showError(box, "");
  let response, problem = "";
  try {
    response = await fetch("/v1/models", { headers: headers(false) });
    if (!response.ok) problem = await errorText(response);
  } catch (err) {
    problem = `cannot reach the server: ${err.message}`;
  }
  if (mine !== page.connects) return;
  if (problem) {
    showError(box, problem);
    return;
  }
  const card = (await response.json()).data[0];
  page.model = card;
  document.title = `wgc: ${card.id}`;
  $("#title").textContent = `wgc: ${card.id}`;
  $("#summary").textContent = `emits ${card.emits.join(", ") || "nothing"}` + (card.fake ? " (fake components)" : "");
  for (const route of ["speech", "images", "chat", "generate"]) $(`#${route}`).hidden = !card.routes[route];
  const voice = card.params.find((p) => p.name === "voice" || p.name === "speaker");
  const select = $("#speech [name=voice]");
  select.replaceChildren(...(voice && voice.choices ? voice.choices : ["default"]).map((name) => new Option(name)));
  if (voice && voice.default) select.value = voice.default;
}

// ---- speech: the whole WAV, played from a blob URL -------------------------------------------------

function speech(section) {
  onSubmit(section, async () => {
    const body = { model: page.model.id, input: $("[name=input]", section).value,
                   voice: $("[name=voice]", section).value, response_format: "wav", stream: false };
    const params = paramsOf(section);
    if (params) body.params = params;
    const t0 = performance.now();
    say(section, "speaking ...");
    const response = await post("/v1/audio/speech", body);
    const blob = await response.blob();
    const audio = $("audio", section);
    if (audio.src) URL.revokeObjectURL(audio.src);
    audio.src = URL.createObjectURL(blob);
    say(section, `${blob.size} bytes of WAV at ${response.headers.get("X-Sample-Rate")} Hz in ${seconds(t0)}`);
    audio.play().catch(() => {});  // a browser may refuse to autoplay: the controls stay
  });
}

// ---- images: b64_json into an <img> ----------------------------------------------------------------

function images(section) {
  onSubmit(section, async () => {
    const body = { model: page.model.id, prompt: $("[name=prompt]", section).value, response_format: "b64_json" };
    const size = $("[name=size]", section).value.trim();
    if (size && size !== "auto") body.size = size;
    const params = paramsOf(section);
    if (params) body.params = params;
    const t0 = performance.now();
    say(section, "generating ...");
    const answer = await (await post("/v1/images/generations", body)).json();
    $("img", section).src = `data:image/png;base64,${answer.data[0].b64_json}`;
    say(section, `${answer.size} PNG in ${seconds(t0)}`);
  });
}

// ---- chat: streamed SSE chunks, an image or a WAV attached ----------------------------------------

async function* serverEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
      if (data === "[DONE]") return;
      if (data) yield JSON.parse(data);
    }
  }
}

function readAsDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(new Error(`cannot read ${file.name}`));
    reader.readAsDataURL(file);
  });
}

async function attachment(file) {
  const url = await readAsDataUrl(file);
  if (file.type.startsWith("image/")) return { type: "image_url", image_url: { url } };
  return { type: "input_audio", input_audio: { data: url.slice(url.indexOf(",") + 1), format: "wav" } };
}

function logLine(section, role, text, imageUrl) {
  const item = document.createElement("li");
  item.className = role;
  item.textContent = text;
  if (imageUrl) item.append(document.createElement("br"), Object.assign(new Image(), { src: imageUrl }));
  $(".log", section).append(item);
  return item;
}

function chat(section) {
  $("[name=reset]", section).addEventListener("click", () => {
    page.chat = [];
    $(".log", section).replaceChildren();
    say(section, "");
  });
  onSubmit(section, async () => {
    const text = $("[name=message]", section).value;
    const file = $("[name=file]", section).files[0];
    const content = [{ type: "text", text }];
    if (file) content.push(await attachment(file));
    const body = { model: page.model.id, messages: [...page.chat, { role: "user", content }], stream: true };
    const params = paramsOf(section);
    if (params) body.params = params;
    const image = content[1] && content[1].image_url ? content[1].image_url.url : null;
    logLine(section, "user", text + (file && !image ? ` [${file.name}]` : ""), image);
    const reply = logLine(section, "assistant", "");
    const t0 = performance.now();
    let chunks = 0;
    try {
      const response = await post("/v1/chat/completions", body);
      for await (const event of serverEvents(response)) {
        if (event.error) throw new Error(`${event.error.code || "error"}: ${event.error.message}`);
        const delta = event.choices && event.choices[0] && event.choices[0].delta;
        if (delta && delta.content) reply.textContent += delta.content;
        chunks += 1;
        say(section, `${chunks} chunks, ${seconds(t0)}`);
      }
    } catch (err) {
      reply.remove();
      throw err;
    }
    page.chat = [...body.messages, { role: "assistant", content: reply.textContent }];
    $("[name=file]", section).value = "";
    say(section, `done: ${chunks} chunks in ${seconds(t0)}`);
  });
}

// ---- the native route: NDJSON lines as they come -----------------------------------------------------

function generate(section) {
  onSubmit(section, async () => {
    let body;
    try { body = JSON.parse($("[name=body]", section).value); } catch (err) { throw new Error(`not JSON: ${err.message}`); }
    const out = $(".events", section);
    out.textContent = "";
    const t0 = performance.now();
    const response = await post("/v1/generate", { model: page.model.id, ...body, stream: true });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let lines = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      out.textContent += value;
      lines = out.textContent.split("\n").filter(Boolean).length;
      say(section, `${lines} events, ${seconds(t0)}`);
    }
    const last = out.textContent.trim().split("\n").pop();
    if (last && JSON.parse(last).type === "error") throw new Error(`event: ${JSON.stringify(JSON.parse(last).error)}`);
  });
}

document.addEventListener("DOMContentLoaded", () => {
  speech($("#speech"));
  images($("#images"));
  chat($("#chat"));
  generate($("#generate"));
  $("#key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    connect();
  });
  connect();
});
