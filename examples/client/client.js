// The example bot's own browser client: SmallWebRTC to the bot's /api/offer, the microphone
// up, the bot's audio down, and the RTVI messages on the data channel for the transcript and
// the compactions. Plain browser APIs, no library and nothing loaded from another host; no
// STUN or TURN server unless the page is opened with ?ice=<JSON list of RTCIceServer>.
"use strict";

const RTVI_LABEL = "rtvi-ai";
const RTVI_VERSION = "2.2.0"; // the protocol Pipecat 1.14 speaks
const GATHER_TIMEOUT_MS = 2000;

const $ = (id) => document.getElementById(id);
const state = {
  pc: null,
  channel: null,
  ping: null,
  botItem: null, // the bot's reply being written
  seenSegments: new Set(),
  compactions: 0,
};
// Counted for anyone curious (and the browser test): what the bot sent, by type.
window.botMessages = {};

function setStatus(text, kind) {
  const el = $("status");
  el.textContent = text;
  el.dataset.state = kind;
}

function addTurn(role, text) {
  const li = document.createElement("li");
  li.className = role;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = role === "user" ? "you" : "bot";
  const body = document.createElement("span");
  body.className = "text";
  body.textContent = text;
  li.append(who, body);
  $("transcript").append(li);
  li.scrollIntoView({ block: "end" });
  return li;
}

function appendBotText(text) {
  if (!text) return;
  if (!state.botItem) {
    state.botItem = addTurn("bot", text);
    return;
  }
  const body = state.botItem.querySelector(".text");
  body.textContent = (body.textContent + " " + text).trim();
}

function fmt(n) {
  return typeof n === "number" ? n.toLocaleString("en-US") : "?";
}

function bar(label, tokens, max, cls) {
  const row = document.createElement("div");
  row.className = "bar " + cls;
  const name = document.createElement("span");
  name.className = "label";
  name.textContent = label;
  const fill = document.createElement("span");
  fill.className = "fill";
  fill.style.width = Math.max(2, Math.round((170 * tokens) / Math.max(1, max))) + "px";
  const value = document.createElement("span");
  value.textContent = fmt(tokens) + " tokens";
  row.append(name, fill, value);
  return row;
}

function showCompaction(c) {
  state.compactions += 1;
  $("compaction-count").textContent = String(state.compactions);
  const li = document.createElement("li");
  li.className = "compaction";
  const title = document.createElement("div");
  title.className = "card-title";
  title.textContent = "Compaction #" + (c.compaction ?? state.compactions) + " ";
  const reason = document.createElement("span");
  reason.className = "reason";
  reason.textContent = "(" + (c.reason || "?") + ", summary took " + c.latency_s + " s)";
  title.append(reason);
  const bars = document.createElement("div");
  bars.className = "bars";
  const max = Math.max(c.tokens_before || 0, c.tokens_after || 0);
  bars.append(bar("before", c.tokens_before, max, "before"), bar("after", c.tokens_after, max, "after"));
  const facts = document.createElement("div");
  facts.className = "facts";
  facts.textContent =
    fmt(c.messages_summarized) + " messages summarized; " +
    fmt(c.messages_before) + " \u2192 " + fmt(c.messages_after) + " messages in the context";
  li.append(title, bars, facts);
  if (c.summary) {
    const details = document.createElement("details");
    details.open = true;
    const summary = document.createElement("summary");
    summary.textContent = "what the summary says";
    const pre = document.createElement("pre");
    pre.textContent = c.summary;
    details.append(summary, pre);
    li.append(details);
  }
  $("compactions").querySelectorAll("details").forEach((d) => (d.open = false));
  $("compactions").prepend(li);
  const marker = document.createElement("li");
  marker.className = "marker";
  marker.textContent =
    "context compacted: " + fmt(c.tokens_before) + " \u2192 " + fmt(c.tokens_after) + " tokens";
  $("transcript").append(marker);
}

function onRtvi(msg) {
  const type = msg.type;
  window.botMessages[type] = (window.botMessages[type] || 0) + 1;
  const data = msg.data || {};
  switch (type) {
    case "bot-ready":
      setStatus("connected: talk to the bot", "connected");
      break;
    case "user-transcription":
      // One message per transcribed segment: a turn's segments share one line.
      if (data.final && data.text) {
        state.botItem = null;
        const last = $("transcript").lastElementChild;
        if (last && last.className === "user") {
          const body = last.querySelector(".text");
          body.textContent = body.textContent + " " + data.text;
        } else {
          addTurn("user", data.text);
        }
      }
      break;
    case "bot-llm-started":
      state.botItem = null;
      break;
    case "bot-output":
      // One message per spoken sentence ("new" before it is spoken, "completed" after):
      // keep each segment once.
      if (data.segment_id !== undefined && data.segment_id !== null) {
        if (state.seenSegments.has(data.segment_id)) break;
        state.seenSegments.add(data.segment_id);
      }
      appendBotText(data.text);
      break;
    case "server-message":
      if (data.type === "context-compacted") showCompaction(data);
      break;
    case "error":
      setStatus("bot error: " + (data.message || "unknown"), "error");
      break;
  }
}

function send(message) {
  if (state.channel && state.channel.readyState === "open") {
    state.channel.send(JSON.stringify(message));
  }
}

function iceServers() {
  const raw = new URLSearchParams(location.search).get("ice");
  if (!raw) return [];
  try {
    return JSON.parse(raw);
  } catch (e) {
    setStatus("?ice= is not a JSON list of ICE servers", "error");
    return [];
  }
}

function gathered(pc) {
  // The offer goes once with every candidate (the server answers with all of its own).
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      if (pc.iceGatheringState === "complete") resolve();
    };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, GATHER_TIMEOUT_MS);
  });
}

async function connect() {
  setStatus("asking for the microphone...", "busy");
  const mic = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
  });
  const pc = new RTCPeerConnection({ iceServers: iceServers() });
  state.pc = pc;
  pc.addTransceiver(mic.getAudioTracks()[0], { direction: "sendrecv", streams: [mic] });
  pc.ontrack = (event) => {
    if (event.track.kind !== "audio") return;
    const audio = $("bot-audio");
    audio.srcObject = event.streams[0] || new MediaStream([event.track]);
    audio.play().catch(() => {});
  };
  pc.onconnectionstatechange = () => {
    if (pc.connectionState === "failed" || pc.connectionState === "closed") disconnect();
  };
  const channel = pc.createDataChannel("chat", { ordered: true });
  state.channel = channel;
  channel.onopen = () => {
    // The bot treats a client that stops pinging for 3 s as gone.
    state.ping = setInterval(() => channel.readyState === "open" && channel.send("ping: " + Date.now()), 1000);
    send({
      label: RTVI_LABEL,
      type: "client-ready",
      id: String(Date.now()),
      data: { version: RTVI_VERSION, about: { library: "pipecat-summarizer example page" } },
    });
  };
  channel.onmessage = (event) => {
    let msg;
    try {
      msg = JSON.parse(event.data);
    } catch (e) {
      return;
    }
    if (msg && msg.label === RTVI_LABEL) onRtvi(msg);
  };

  setStatus("connecting...", "busy");
  await pc.setLocalDescription(await pc.createOffer());
  await gathered(pc);
  const response = await fetch("/api/offer", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ sdp: pc.localDescription.sdp, type: pc.localDescription.type }),
  });
  if (!response.ok) throw new Error("the bot refused the offer: HTTP " + response.status);
  const answer = await response.json();
  await pc.setRemoteDescription({ sdp: answer.sdp, type: answer.type });
  setStatus("connected, waiting for the bot...", "busy");
}

function disconnect() {
  clearInterval(state.ping);
  state.ping = null;
  if (state.pc) {
    state.pc.getSenders().forEach((s) => s.track && s.track.stop());
    state.pc.close();
  }
  state.pc = null;
  state.channel = null;
  $("connect").textContent = "Connect";
  setStatus("not connected", "idle");
}

$("connect").addEventListener("click", async () => {
  const button = $("connect");
  if (state.pc) {
    disconnect();
    return;
  }
  button.disabled = true;
  try {
    await connect();
    button.textContent = "Disconnect";
  } catch (e) {
    disconnect();
    setStatus("could not connect: " + e.message, "error");
  } finally {
    button.disabled = false;
  }
});
