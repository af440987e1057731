// A small ACP agent for rein's tests, on the official ACP TypeScript SDK.
//
// Each prompt turn: it streams a message, announces an `edit` tool call on the
// file the prompt names ("write FILE: TEXT"), asks the client for permission,
// and — when allowed — writes the file through the client's
// `fs/write_text_file` (or by itself with ACP_TEST_WRITE=native), then ends the
// turn. Rejected, it reports the tool call failed and ends the turn.
// ACP_TEST_SLOW=1: after the permission it waits until cancelled.
// ACP_TEST_END_TURN_ON_CANCELLED=1: a `cancelled` outcome alone ends the turn
// `end_turn`, as real agents do; only a `session/cancel` cancels it.
// ACP_TEST_IMAGES=1: it says it takes images, and "what images?" is
// answered with the prompt's image blocks (type and decoded size) as JSON.
// The prompt "which MCP servers?" is answered with the `mcpServers` the
// session was opened (or loaded) with, as JSON; "end with nothing" ends the
// turn with nothing in it; "upstream STATUS" fails the prompt request as
// Claude Code reports its model API's errors ("API Error: STATUS …").
// Sessions are kept in ACP_TEST_STATE (a directory) so that `session/load`
// works across processes; loading replays the earlier turns.
import { agent, methods, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";
import { Readable, Writable } from "node:stream";
import fs from "node:fs";
import path from "node:path";

const stateDir = process.env.ACP_TEST_STATE;
const cancelled = new Set();

function load(sessionId) {
  if (!stateDir) return null;
  try {
    return JSON.parse(fs.readFileSync(path.join(stateDir, `${sessionId}.json`), "utf8"));
  } catch {
    return null;
  }
}

function save(session) {
  if (!stateDir) return;
  fs.mkdirSync(stateDir, { recursive: true });
  fs.writeFileSync(path.join(stateDir, `${session.id}.json`), JSON.stringify(session));
}

const sessions = new Map();

const app = agent({ name: "rein-test-agent" })
  .onRequest(methods.agent.initialize, ({ params }) => {
    sessions.set("fs", params.clientCapabilities?.fs ?? {});
    return {
      protocolVersion: PROTOCOL_VERSION,
      agentCapabilities: {
        loadSession: true,
        mcpCapabilities: { http: true },
        promptCapabilities: { image: process.env.ACP_TEST_IMAGES === "1" },
      },
      agentInfo: { name: "rein-test-agent", version: "1.0.0" },
    };
  })
  .onRequest(methods.agent.session.new, ({ params }) => {
    const session = {
      id: `sess-${process.pid}-${Date.now()}`,
      cwd: params.cwd,
      turns: [],
      mcpServers: params.mcpServers,
    };
    sessions.set(session.id, session);
    save(session);
    return { sessionId: session.id };
  })
  .onRequest(methods.agent.session.load, async ({ params, client }) => {
    const session = load(params.sessionId);
    if (!session) throw new Error(`unknown session ${params.sessionId}`);
    session.cwd = params.cwd;
    session.mcpServers = params.mcpServers;
    sessions.set(session.id, session);
    for (const turn of session.turns) {
      await client.notify(methods.client.session.update, {
        sessionId: session.id,
        update: { sessionUpdate: "user_message_chunk", content: { type: "text", text: turn } },
      });
    }
    return {};
  })
  .onNotification(methods.agent.session.cancel, ({ params }) => {
    cancelled.add(params.sessionId);
  })
  .onRequest(methods.agent.session.prompt, async ({ params, client }) => {
    const session = sessions.get(params.sessionId);
    const text = params.prompt.map((b) => (b.type === "text" ? b.text : "")).join("");
    // As an agent whose upstream model failed mid-stream: the turn ends with
    // nothing in it.
    if (text === "end with nothing") {
      return { stopReason: "end_turn" };
    }
    // As Claude Code reports its model API's errors: "API Error: STATUS …",
    // failing the prompt request.
    const upstream = /^upstream (\d{3})$/.exec(text);
    if (upstream) {
      throw new Error(
        `API Error: ${upstream[1]} {"type":"error","error":{"type":"api_error","message":"upstream said ${upstream[1]}"}}`,
      );
    }
    const say = (t) =>
      client.notify(methods.client.session.update, {
        sessionId: session.id,
        update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: t } },
      });
    const update = (u) => client.notify(methods.client.session.update, { sessionId: session.id, update: u });
    const earlier = session.turns.length;
    session.turns.push(text);
    save(session);
    await say(earlier ? `Resuming after ${earlier} earlier turn(s). ` : "Working on it. ");
    await update({
      sessionUpdate: "plan",
      entries: [{ content: "Write the file", priority: "high", status: "in_progress" }],
    });
    if (text === "metered") {
      // The turn's usage, as an agent that counts its model's tokens reports
      // it (ACP's PromptResponse.usage): fresh input apart from the cache.
      await say("Counted.");
      return {
        stopReason: "end_turn",
        usage: { totalTokens: 57, inputTokens: 20, outputTokens: 7, cachedReadTokens: 25, cachedWriteTokens: 5 },
      };
    }
    if (text === "what images?") {
      // The image blocks of the prompt: type and decoded size.
      const images = params.prompt
        .filter((b) => b.type === "image")
        .map((b) => ({ mimeType: b.mimeType, bytes: Buffer.from(b.data, "base64").length }));
      await say(JSON.stringify(images));
      return { stopReason: "end_turn" };
    }
    if (text === "which MCP servers?") {
      await say(JSON.stringify(session.mcpServers));
      return { stopReason: "end_turn" };
    }
    const m = /write ([^:]+): (.*)$/s.exec(text);
    if (!m) {
      await say("Nothing to write.");
      return { stopReason: "end_turn" };
    }
    const file = path.join(session.cwd, m[1].trim());
    const content = m[2];
    const call = { toolCallId: "call_1", title: `Write ${m[1].trim()}`, kind: "edit" };
    await update({
      sessionUpdate: "tool_call",
      ...call,
      status: "pending",
      locations: [{ path: file }],
      rawInput: { path: file, content },
    });
    const answer = await client.request(methods.client.session.requestPermission, {
      sessionId: session.id,
      toolCall: { ...call, locations: [{ path: file }], rawInput: { path: file, content } },
      options: [
        { optionId: "opt-allow", name: "Allow once", kind: "allow_once" },
        { optionId: "opt-always", name: "Always allow", kind: "allow_always" },
        { optionId: "opt-reject", name: "Reject", kind: "reject_once" },
        { optionId: "opt-never", name: "Never", kind: "reject_always" },
      ],
    });
    if (cancelled.has(session.id)) {
      return { stopReason: "cancelled" };
    }
    if (answer.outcome.outcome === "cancelled") {
      if (process.env.ACP_TEST_END_TURN_ON_CANCELLED === "1") {
        // Like a real agent's next step: it yields once (the SDK may hand it
        // a `session/cancel` that came before the answer only then), and
        // stops only if it was cancelled.
        await new Promise((r) => setTimeout(r, 10));
        if (cancelled.has(session.id)) {
          return { stopReason: "cancelled" };
        }
        await say("The permission was cancelled; nothing written.");
        return { stopReason: "end_turn" };
      }
      return { stopReason: "cancelled" };
    }
    const chosen = answer.outcome.optionId;
    if (chosen === "opt-reject" || chosen === "opt-never") {
      await update({ sessionUpdate: "tool_call_update", toolCallId: "call_1", status: "failed" });
      await say(`Not allowed to write ${m[1].trim()} (${chosen}).`);
      return { stopReason: "end_turn" };
    }
    if (process.env.ACP_TEST_SLOW === "1") {
      while (!cancelled.has(session.id)) {
        await new Promise((r) => setTimeout(r, 20));
      }
      return { stopReason: "cancelled" };
    }
    await update({ sessionUpdate: "tool_call_update", toolCallId: "call_1", status: "in_progress" });
    if (process.env.ACP_TEST_WRITE === "native" || !sessions.get("fs").writeTextFile) {
      fs.writeFileSync(file, content);
    } else {
      await client.request(methods.client.fs.writeTextFile, { sessionId: session.id, path: file, content });
    }
    const back = sessions.get("fs").readTextFile
      ? (await client.request(methods.client.fs.readTextFile, { sessionId: session.id, path: file })).content
      : fs.readFileSync(file, "utf8");
    await update({ sessionUpdate: "tool_call_update", toolCallId: "call_1", status: "completed" });
    await say(`Wrote ${m[1].trim()} (${back.length} bytes, ${chosen}).`);
    return { stopReason: "end_turn" };
  });

const connection = app.connect(ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
