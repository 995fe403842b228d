// The live transport: oasr's WebSocket /v1/audio/stream (protocol: oasr/server/streaming.py).
// The page knows only this function: another transport (the Realtime route) replaces this module.
//
// openStream({model, apiKey, sampleRate, onEvent, onClose}) -> Promise of {send(Int16Array buffer), finish(), close()}
//   onEvent({type: "partial" | "final" | "endpoint" | "error" | "done", ...}) for each event the server sends;
//   onClose({code, opened}) once, when the connection ends (opened: false when the upgrade failed).

const KEY_SUBPROTOCOL = "openai-insecure-api-key.";

export function openStream({ model, apiKey, sampleRate, onEvent, onClose }) {
  const url = new URL("/v1/audio/stream", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  // A browser cannot set Authorization on a WebSocket: the key travels as a subprotocol.
  const ws = apiKey ? new WebSocket(url, [KEY_SUBPROTOCOL + apiKey]) : new WebSocket(url);
  ws.binaryType = "arraybuffer";
  let opened = false;
  return new Promise((resolve, reject) => {
    ws.onopen = () => {
      opened = true;
      const config = { sample_rate: sampleRate, sample_format: "pcm16" };
      if (model) config.model = model;
      ws.send(JSON.stringify(config));
      resolve({
        send(pcm) {
          if (ws.readyState === WebSocket.OPEN) ws.send(pcm);
        },
        finish() {
          if (ws.readyState === WebSocket.OPEN) ws.send("done");
        },
        close() {
          ws.close(1000);
        },
      });
    };
    ws.onmessage = (message) => {
      if (typeof message.data === "string") onEvent(JSON.parse(message.data));
    };
    ws.onclose = (e) => {
      onClose({ code: e.code, opened });
      if (!opened) reject(new Error("the live stream was refused"));
    };
  });
}
