// An ACP client for rein's tests, on the official ACP TypeScript SDK: it
// starts `rein acp` (REIN_BIN, with REIN_ARGS as a JSON array), opens a session
// on ACP_CWD (with the MCP servers of ACP_MCP, a JSON list), sends the prompt
// ACP_PROMPT and answers permission requests.
//
// ACP_SCENARIO:
//   run        answer each request with the first option of its kind in
//              ACP_ANSWERS (a JSON list: "allow" or an option id), until the
//              turn ends.
//   elsewhere  the first request is decided by another process (`rein
//              approvals approve ID --as alice`); once rein says so, this
//              client answers it "deny" anyway; later ones are answered "allow".
//   cancel     the first request is answered `cancelled` after a
//              `session/cancel`; then the prompt `/resume` resumes the task,
//              its questions answered "allow".
//   reload     the first request is answered `cancelled` alone; the session
//              is loaded again, its question asked and held while `/resume`
//              runs, then allowed, and later ones too.
//   kill       at the first request rein is killed (SIGKILL); a new `rein acp`
//              loads the session, and its questions are answered "allow"
//              until rein says the task completed.
//   bench      ACP_ROUNDS rounds: the prompt runs a goal whose plan is
//              confirmed; each answer's latency to the next update is timed.
//
// It prints one JSON object: what it saw (updates, permission requests, stop
// reasons, timings).
import { client, methods, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";
import { spawn, execFileSync } from "node:child_process";
import { Readable, Writable } from "node:stream";

const bin = process.env.REIN_BIN;
const args = JSON.parse(process.env.REIN_ARGS ?? "[]");
const cwd = process.env.ACP_CWD;
const prompt = process.env.ACP_PROMPT ?? "";
const scenario = process.env.ACP_SCENARIO ?? "run";
const answers = JSON.parse(process.env.ACP_ANSWERS ?? '["allow"]');

const seen = { updates: [], asked: [], stops: [], usage: [], loaded: [], timings: [], errors: [] };
let listeners = [];
const waitFor = (test, ms = 60000) =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting (${test})`)), ms);
    const check = (u) => {
      if (test(u)) {
        clearTimeout(timer);
        listeners = listeners.filter((l) => l !== check);
        resolve(u);
        return true;
      }
      return false;
    };
    if (!seen.updates.some((u) => test(u))) listeners.push(check);
    else {
      clearTimeout(timer);
      resolve();
    }
  });

const message = (u) => (u.sessionUpdate === "agent_message_chunk" ? u.content.text : "");

function start() {
  const child = spawn(bin, ["acp", ...args], { stdio: ["pipe", "pipe", "inherit"] });
  const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  return { child, stream };
}

function choose(params, wanted) {
  const opts = params.options;
  if (wanted === "allow") return opts.find((o) => o.kind === "allow_once").optionId;
  return opts.find((o) => o.optionId === wanted)?.optionId ?? wanted;
}

let onAsk = async () => ({ outcome: { outcome: "cancelled" } });
let answered = 0;
const app = client({ name: "rein-test-editor" })
  .onRequest(methods.client.session.requestPermission, async ({ params }) => {
    seen.asked.push({ id: params.toolCall.toolCallId, title: params.toolCall.title, options: params.options });
    return onAsk(params);
  })
  .onNotification(methods.client.session.update, ({ params }) => {
    const u = { ...params.update, at: performance.now() };
    seen.updates.push(u);
    for (const l of [...listeners]) l(u);
  });

async function init(agent) {
  const init = await agent.request(methods.agent.initialize, {
    protocolVersion: PROTOCOL_VERSION,
    clientCapabilities: {},
    clientInfo: { name: "rein-test-editor", version: "1.0.0" },
  });
  seen.init = init;
  return init;
}

const first = start();
try {
  await app.connectWith(first.stream, async (agent) => {
    await init(agent);
    const mcpServers = JSON.parse(process.env.ACP_MCP ?? "[]");
    const { sessionId } = await agent.request(methods.agent.session.new, { cwd, mcpServers });
    seen.sessionId = sessionId;
    if (scenario === "run" || scenario === "bench") {
      onAsk = async (params) => {
        const wanted = answers[Math.min(answered, answers.length - 1)];
        answered += 1;
        const optionId = choose(params, wanted);
        const t0 = performance.now();
        // The next update about this request: rein took the answer in.
        waitFor((u) => u.toolCallId === params.toolCall.toolCallId && u.status && u.status !== "pending" && u.at > t0)
          .then((u) => seen.timings.push(u.at - t0))
          .catch((e) => seen.errors.push(String(e)));
        return { outcome: { outcome: "selected", optionId } };
      };
      const rounds = scenario === "bench" ? Number(process.env.ACP_ROUNDS ?? "20") : 1;
      for (let i = 0; i < rounds; i++) {
        // ACP_IMAGE: a PNG's base64, sent as an image block after the text.
        const image = process.env.ACP_IMAGE
          ? [{ type: "image", mimeType: "image/png", data: process.env.ACP_IMAGE }]
          : [];
        const r = await agent.request(methods.agent.session.prompt, {
          sessionId,
          prompt: [{ type: "text", text: prompt }, ...image],
        });
        seen.stops.push(r.stopReason);
        seen.usage.push(r.usage ?? null);
      }
    } else if (scenario === "elsewhere") {
      onAsk = async (params) => {
        const id = params.toolCall.toolCallId;
        if (answered++ > 0) return { outcome: { outcome: "selected", optionId: choose(params, "allow") } };
        execFileSync(bin, ["approvals", "approve", id, "--as", "alice"], {
          stdio: ["ignore", "ignore", "inherit"],
        });
        await waitFor((u) => message(u).includes(`${id}: approved`) && message(u).includes("alice"));
        return { outcome: { outcome: "selected", optionId: "deny" } };
      };
      const r = await agent.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text: prompt }],
      });
      seen.stops.push(r.stopReason);
    } else if (scenario === "cancel") {
      onAsk = async () => {
        await agent.notify(methods.agent.session.cancel, { sessionId });
        return { outcome: { outcome: "cancelled" } };
      };
      const r = await agent.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text: prompt }],
      });
      seen.stops.push(r.stopReason);
      seen.pausedAt = seen.updates.length;
      // Then `/resume`, its questions allowed.
      onAsk = async (params) => ({ outcome: { outcome: "selected", optionId: choose(params, "allow") } });
      const again = await agent.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text: "/resume" }],
      });
      seen.stops.push(again.stopReason);
    } else if (scenario === "reload") {
      // The first request is answered `cancelled` (no session/cancel: by the
      // protocol the client is cancelling the turn). Then the session is
      // loaded again: its paused task's question is asked, and held while
      // `/resume` runs the task on; once rein shows the question again, the
      // held one is answered "allow", and later ones too.
      let asks = 0;
      let held;
      let heldAsked;
      const loadedAsk = new Promise((resolve) => (heldAsked = resolve));
      onAsk = async (params) => {
        asks += 1;
        if (asks === 1) return { outcome: { outcome: "cancelled" } };
        if (asks === 2) {
          heldAsked(params.toolCall.toolCallId);
          return new Promise((resolve) => {
            held = () => resolve({ outcome: { outcome: "selected", optionId: choose(params, "allow") } });
          });
        }
        return { outcome: { outcome: "selected", optionId: choose(params, "allow") } };
      };
      const r = await agent.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text: prompt }],
      });
      seen.stops.push(r.stopReason);
      seen.pendingAfterCancel = JSON.parse(
        execFileSync(bin, ["approvals", "list", "--status", "pending", "--json"], {
          stdio: ["ignore", "pipe", "inherit"],
        }).toString(),
      ).map((a) => a.id);
      await agent.request(methods.agent.session.load, { sessionId, cwd, mcpServers: [] });
      const id = await loadedAsk;
      const t0 = performance.now();
      const resumed = agent.request(methods.agent.session.prompt, {
        sessionId,
        prompt: [{ type: "text", text: "/resume" }],
      });
      // The run shows its pending question again (and must not ask it a
      // third time while the client has it).
      await waitFor((u) => u.sessionUpdate === "tool_call" && u.toolCallId === id && u.at > t0);
      held();
      const again = await resumed;
      seen.stops.push(again.stopReason);
    } else if (scenario === "kill") {
      let asked;
      const killed = new Promise((resolve) => (asked = resolve));
      onAsk = async (params) => {
        first.child.kill("SIGKILL");
        asked(params.toolCall.toolCallId);
        return new Promise(() => {});
      };
      agent
        .request(methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: prompt }] })
        .then((r) => seen.stops.push(r.stopReason))
        .catch(() => {}); // rein was killed before it answered
      seen.killedAt = await killed;
      await new Promise((r) => first.child.once("exit", r));
    }
  });
} catch (e) {
  if (scenario !== "kill") seen.errors.push(String(e?.message ?? e));
}

if (scenario === "kill") {
  const before = seen.updates.length;
  const second = start();
  onAsk = async (params) => ({ outcome: { outcome: "selected", optionId: choose(params, "allow") } });
  try {
    await app.connectWith(second.stream, async (agent) => {
      const again = await init(agent);
      if (!again.agentCapabilities?.loadSession) throw new Error("rein does not say it loads sessions");
      await agent.request(methods.agent.session.load, { sessionId: seen.sessionId, cwd, mcpServers: [] });
      seen.loaded = seen.updates.slice(before).map((u) => u.sessionUpdate);
      await waitFor((u) => message(u).includes("completed."));
    });
  } catch (e) {
    seen.errors.push(String(e?.message ?? e));
  }
  second.child.kill("SIGTERM");
}

if (scenario !== "kill") first.child.stdin.end();
// Exit once the pipe has taken it all (a large write is asynchronous).
process.stdout.write(JSON.stringify(seen) + "\n", () => process.exit(0));
