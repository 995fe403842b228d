// The page: model picker (/v1/models), live microphone transcription (worklet.js -> transport.js)
// and file transcription (/v1/audio/transcriptions).

import { openStream } from "./transport.js";

const $ = (id) => document.getElementById(id);
const modelSelect = $("model");
const keyInput = $("api-key");
const recordButton = $("record");
const liveStatus = $("live-status");
const transcript = $("transcript");
const partial = $("partial");
const fileInput = $("file");
const drop = $("drop");
const fileStatus = $("file-status");
const fileText = $("file-text");
const errorBox = $("error");

let live = null; // the running capture: {stream, context, transport}
let streamable = false; // whether Start may be pressed (checkStreaming)

function showError(message) {
  errorBox.textContent = message;
  errorBox.hidden = !message;
}

function authHeaders() {
  const key = keyInput.value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// The {message, code} of an OpenAI-shaped error body, or one made from the status line.
async function apiError(response) {
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) return body.error;
  } catch (_) {
    // not JSON: the status says enough
  }
  return { message: `${response.status} ${response.statusText}`, code: null };
}

async function loadModels() {
  showError("");
  const previous = modelSelect.value;
  let response;
  try {
    response = await fetch("/v1/models", { headers: authHeaders() });
  } catch (e) {
    showError(`Could not list the models: ${e.message}`); // the server is down, or a key the browser cannot send
    return false;
  }
  if (!response.ok) {
    const error = await apiError(response);
    modelSelect.replaceChildren();
    modelSelect.disabled = true;
    if (response.status === 401) {
      showError("This server needs an API key: enter it under Settings.");
      keyInput.focus();
    } else {
      showError(`Could not list the models: ${error.message}`);
    }
    return false;
  }
  const { data } = await response.json();
  modelSelect.replaceChildren(
    ...data.map((card) => {
      const option = document.createElement("option");
      option.value = option.textContent = card.id;
      return option;
    }),
  );
  if (data.some((card) => card.id === previous)) modelSelect.value = previous;
  modelSelect.disabled = data.length === 0;
  return true;
}

// Whether the server would take a live stream now; says why not on the page.
async function checkStreaming() {
  let response;
  try {
    response = await fetch("/v1/audio/stream", { headers: authHeaders() });
  } catch (e) {
    response = null;
  }
  const status = response === null ? null : response.status;
  // Start may be pressed when the server takes streams now, or is only busy (429: try again later).
  streamable = (status === 426 || status === 429) && Boolean(navigator.mediaDevices);
  if (status === 426 && streamable) {
    if (!live) liveStatus.textContent = "Ready: press Start and speak.";
  } else if (status === 426) {
    liveStatus.textContent =
      "This browser gives the microphone to https:// pages and to localhost only: open the page that way.";
  } else if (status === null) {
    liveStatus.textContent = "The server cannot be reached.";
  } else {
    const error = await apiError(response);
    liveStatus.textContent =
      error.code === "streaming_unsupported"
        ? "This model cannot transcribe live (it is offline-only): drop a recording below instead."
        : `Live transcription is not available now: ${error.message}`;
  }
  recordButton.disabled = !streamable && !live;
}

async function refresh() {
  if (await loadModels()) {
    await checkStreaming();
  } else {
    recordButton.disabled = !live;
    liveStatus.textContent = "Live transcription needs the model list first.";
  }
}

function onEvent(event) {
  if (event.type === "partial") {
    partial.textContent = event.text;
  } else if (event.type === "final") {
    const final = document.createElement("span");
    final.className = "final";
    final.textContent = event.text;
    partial.before(final);
    partial.textContent = "";
  } else if (event.type === "error") {
    showError(`The live stream stopped: ${event.message} (${event.code})`);
  } else if (event.type === "done") {
    liveStatus.textContent = "Done.";
  }
}

async function onClose({ code, opened }) {
  stopCapture();
  setRecording(false);
  if (!opened) {
    // The browser hides the refused upgrade's answer: ask the server over HTTP.
    await checkStreaming();
    showError(`The live stream was refused. ${liveStatus.textContent}`);
  } else if (code !== 1000 && errorBox.hidden) {
    showError(`The live stream was closed (code ${code}).`);
  }
  if (opened && code === 1000) liveStatus.textContent = "Done.";
  recordButton.disabled = !streamable;
}

function setRecording(on) {
  recordButton.textContent = on ? "Stop" : "Start"; // the label says what a press does
  recordButton.classList.toggle("recording", on);
}

function stopCapture() {
  if (!live) return;
  live.stream.getTracks().forEach((track) => track.stop());
  live.context.close();
  live = null;
}

async function start() {
  showError("");
  recordButton.disabled = true;
  liveStatus.textContent = "Asking for the microphone…";
  let stream, context;
  try {
    stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
    context = new AudioContext();
    await context.audioWorklet.addModule("/ui/worklet.js");
  } catch (e) {
    if (stream) stream.getTracks().forEach((track) => track.stop());
    if (context) context.close();
    showError(`The microphone is not available: ${e.message}`);
    liveStatus.textContent = "Ready: press Start and speak.";
    recordButton.disabled = false;
    return;
  }
  // Capture starts now and is held until the stream is open: the first words are not lost.
  const pending = [];
  const capture = new AudioWorkletNode(context, "pcm16-capture");
  capture.port.onmessage = (message) =>
    live && live.transport ? live.transport.send(message.data) : pending.push(message.data);
  context.createMediaStreamSource(stream).connect(capture);
  capture.connect(context.destination); // pulls the graph; the worklet outputs silence
  live = { stream, context, transport: null };
  transcript.querySelectorAll(".final").forEach((span) => span.remove());
  partial.textContent = "";
  liveStatus.textContent = "Connecting…";
  let transport;
  try {
    transport = await openStream({
      model: modelSelect.value,
      apiKey: keyInput.value.trim(),
      sampleRate: context.sampleRate,
      onEvent,
      onClose,
    });
  } catch (e) {
    if (!e.refused) {
      // never attempted (a key the browser cannot send): onClose was not called
      stopCapture();
      setRecording(false);
      showError(`The live stream could not open: ${e.message}`);
      liveStatus.textContent = "Ready: press Start and speak.";
      recordButton.disabled = false;
    }
    return; // refused: onClose said why
  }
  pending.forEach((pcm) => transport.send(pcm));
  live.transport = transport;
  setRecording(true);
  recordButton.disabled = false;
  liveStatus.textContent = "Listening… press Stop to finish.";
}

function stop() {
  const transport = live && live.transport;
  stopCapture();
  setRecording(false);
  recordButton.disabled = true;
  liveStatus.textContent = "Finishing…";
  if (transport) transport.finish();
}

async function transcribeFile(file) {
  showError("");
  fileText.textContent = "";
  fileStatus.textContent = `Transcribing ${file.name}…`;
  const form = new FormData();
  form.append("file", file, file.name);
  if (modelSelect.value) form.append("model", modelSelect.value);
  form.append("response_format", "json");
  let response;
  try {
    response = await fetch("/v1/audio/transcriptions", { method: "POST", headers: authHeaders(), body: form });
  } catch (e) {
    fileStatus.textContent = "";
    showError(`The server cannot be reached: ${e.message}`);
    return;
  }
  if (!response.ok) {
    const error = await apiError(response);
    fileStatus.textContent = "";
    showError(`${file.name} was not transcribed: ${error.message}`);
    return;
  }
  const { text } = await response.json();
  fileText.textContent = text;
  fileStatus.textContent = `${file.name}:`;
}

recordButton.addEventListener("click", () => (live ? stop() : start()));
keyInput.addEventListener("change", refresh);
fileInput.addEventListener("change", () => {
  if (fileInput.files.length) transcribeFile(fileInput.files[0]);
  fileInput.value = "";
});
drop.addEventListener("dragover", (e) => {
  e.preventDefault();
  drop.classList.add("over");
});
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  if (e.dataTransfer.files.length) transcribeFile(e.dataTransfer.files[0]);
});

refresh();
