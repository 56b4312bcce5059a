// The lab's streaming player: raw 16-bit PCM over one HTTP response, played with Web Audio.
// begin() runs on the Synthesize click: it opens the response before the request reaches the
// server, then schedules every chunk right after the previous one as soon as it arrives.
// It times click -> first byte and click -> first sound, and counts stalls (a chunk that came
// after the previous one had finished playing), and shows them in #synth-heard.
(() => {
  const LEAD_S = 0.01; // scheduling margin so the first buffer is not already late
  const state = { ctx: null, abort: null, sources: [], runId: null, last: null };

  function newId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return Array.from({ length: 4 }, () => Math.random().toString(16).slice(2, 10)).join("-");
  }

  function show(text) {
    const el = document.querySelector("#synth-heard");
    if (el) el.innerText = text;
  }

  function describe(m) {
    if (m.error) return `Streaming playback stopped: ${m.error}`;
    if (m.clickToSoundMs === null) return m.done ? "No audio was streamed." : "Waiting for audio…";
    const stalls = m.stalls === 1 ? "1 stall" : `${m.stalls} stalls`;
    return `Heard: first sound ${Math.round(m.clickToSoundMs)} ms after the click ` +
      `(first byte in the browser at ${Math.round(m.clickToByteMs)} ms) · ${m.chunks} chunks, ` +
      `${(m.samples / m.sampleRate).toFixed(2)} s streamed, ${stalls}` + (m.done ? "" : " …");
  }

  function pcmToFloat(bytes) {
    const n = bytes.length >> 1;
    const view = new DataView(bytes.buffer, bytes.byteOffset, n * 2);
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = view.getInt16(2 * i, true) / 32768;
    return out;
  }

  function schedule(m, samples, clickAt) {
    const ctx = state.ctx;
    const buf = ctx.createBuffer(1, samples.length, m.sampleRate);
    buf.copyToChannel(samples, 0);
    const src = ctx.createBufferSource();
    src.buffer = buf;
    src.connect(ctx.destination);
    const now = ctx.currentTime;
    if (m.next !== null && m.next < now) m.stalls += 1;
    const at = m.next === null || m.next < now + LEAD_S ? now + LEAD_S : m.next;
    src.start(at);
    state.sources.push(src);
    m.next = at + buf.duration;
    if (m.clickToSoundMs === null) {
      const latency = (ctx.outputLatency || ctx.baseLatency || 0) * 1000;
      m.clickToSoundMs = performance.now() + (at - now) * 1000 + latency - clickAt;
    }
    m.chunks += 1;
    m.samples += samples.length;
  }

  async function pump(runId, clickAt, signal) {
    const m = { runId, clickEpochMs: performance.timeOrigin + clickAt, clickToByteMs: null, clickToSoundMs: null, chunks: 0, samples: 0,
                stalls: 0, next: null, sampleRate: 0, done: false, error: null };
    state.last = m;
    try {
      const resp = await fetch(`/lab/stream/${runId}`, { signal, cache: "no-store" });
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      m.sampleRate = Number(resp.headers.get("X-Sample-Rate")) || 0;
      const reader = resp.body.getReader();
      let carry = new Uint8Array(0);
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        if (m.clickToByteMs === null) m.clickToByteMs = performance.now() - clickAt;
        const bytes = new Uint8Array(carry.length + value.length);
        bytes.set(carry);
        bytes.set(value, carry.length);
        const even = bytes.length & ~1;
        carry = bytes.slice(even);
        if (even && m.sampleRate) schedule(m, pcmToFloat(bytes.subarray(0, even)), clickAt);
        show(describe(m));
      }
      m.done = true;
    } catch (err) {
      m.error = err.name === "AbortError" ? "cancelled" : String(err.message || err);
    }
    show(describe(m));
  }

  function stop() {
    if (state.abort) state.abort.abort();
    state.sources.forEach((s) => { try { s.stop(); } catch (e) { /* already ended */ } });
    state.sources = [];
    state.abort = null;
    return state.runId || "";
  }

  function begin() {
    stop();
    const clickAt = performance.now();
    const Ctx = window.AudioContext || window.webkitAudioContext;
    if (!state.ctx) state.ctx = new Ctx();
    state.ctx.resume();
    state.runId = newId();
    state.abort = new AbortController();
    show("Waiting for audio…");
    pump(state.runId, clickAt, state.abort.signal);
    return state.runId;
  }

  window.labPlayer = { begin, stop, get last() { return state.last; } };
})();
