// The microphone's samples as signed 16-bit PCM at the AudioContext's rate, posted to the page
// in pieces of about 50 ms (the server resamples to its model's rate).

class PCM16Capture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.size = Math.round(sampleRate / 20);
    this.piece = new Int16Array(this.size);
    this.filled = 0;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    for (let i = 0; i < channel.length; i++) {
      const s = Math.max(-1, Math.min(1, channel[i]));
      this.piece[this.filled++] = s < 0 ? Math.round(s * 32768) : Math.round(s * 32767);
      if (this.filled === this.size) {
        this.port.postMessage(this.piece.buffer, [this.piece.buffer]); // transferred: the array is now empty
        this.piece = new Int16Array(this.size);
        this.filled = 0;
      }
    }
    return true;
  }
}

registerProcessor("pcm16-capture", PCM16Capture);
