// The live transport: oasr's WebSocket /v1/audio/stream (protocol: oasr/server/streaming.py).
// The page knows only this function: another transport (the Realtime route) replaces this module.
//
// openStream({model, apiKey, sampleRate, onEvent, onClose}) -> Promise of {send(pcm16 ArrayBuffer), finish()}
//   onEvent({type: "partial" | "final" | "endpoint" | "error" | "done", ...}) for each event the server sends;
//   onClose({code, opened}) once, when the connection ends (opened: false when the upgrade failed: the
//   promise then rejects with an error whose .refused is true; it rejects without onClose when the
//   connection cannot even be attempted).

const KEY_SUBPROTOCOL = "openai-insecure-api-key.";

export function openStream({ model, apiKey, sampleRate, onEvent, onClose }) {
  const url = new URL("/v1/audio/stream", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  let opened = false;
  return new Promise((resolve, reject) => {
    // A browser cannot set Authorization on a WebSocket: the key travels as a subprotocol
    // (a key that is not an HTTP token throws here, and the promise rejects).
    const ws = apiKey ? new WebSocket(url, [KEY_SUBPROTOCOL + apiKey]) : new WebSocket(url);
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      opened = true;
      // endpoint: a pause ends a segment, so its final comes while the user goes on speaking.
      const config = { sample_rate: sampleRate, sample_format: "pcm16", endpoint: true };
      if (model) config.model = model;
      ws.send(JSON.stringify(config));
      let finished = false; // audio after "done" would be refused: pieces the worklet posted late are dropped
      resolve({
        send(pcm) {
          if (!finished && ws.readyState === WebSocket.OPEN) ws.send(pcm);
        },
        finish() {
          if (!finished && ws.readyState === WebSocket.OPEN) ws.send("done");
          finished = true;
        },
      });
    };
    ws.onmessage = (message) => {
      if (typeof message.data === "string") onEvent(JSON.parse(message.data));
    };
    ws.onclose = (e) => {
      onClose({ code: e.code, opened });
      if (!opened) reject(Object.assign(new Error("the live stream was refused"), { refused: true }));
    };
  });
}
