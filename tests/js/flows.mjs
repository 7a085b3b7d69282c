// The flows of Agent Chat UI / Studio, driven through the SDK's own useStream hook
// (and, for the thread routes useStream does not call, the SDK's Client) against a
// running Atelier server. Usage: node flows.mjs <flow> <apiUrl>
//
// Each flow checks what a user would see (messages, interrupt, branches) and what
// the SDK sent (the fetch log), prints `RESULT <json>` and exits 0; any failed
// check throws, and node exits non-zero with the message.
import { Client } from "@langchain/langgraph-sdk";
import { check, mount, requests, texts, waitFor } from "./harness.mjs";

const [flow, apiUrl] = process.argv.slice(2);
const human = (content) => ({ type: "human", content });
const runBodies = () => requests.filter((r) => r.method === "POST" && r.path.endsWith("/runs/stream"));

function chat(extra = {}) {
  return mount({ apiUrl, assistantId: "chat", fetchStateHistory: true, ...extra });
}

async function settled(probe, what) {
  await waitFor(() => probe.current && !probe.current.isLoading && !probe.current.isThreadLoading, what);
  return probe.current;
}

const flows = {
  // A new thread, one message: the answer streams token by token, then settles.
  async submit() {
    const probe = chat();
    await settled(probe, "mounted");
    await probe.current.submit({ messages: [human("hello")] });
    // The answer's message appears with its first chunk (possibly empty): wait for the run to end.
    await waitFor(() => texts(probe.current).length === 2, "two messages");
    const stream = await settled(probe, "the answer settled");
    check(stream.error == null, "no error", String(stream.error));
    check(texts(stream)[1] === "echo: hello", "the answer", texts(stream));
    const partial = probe.aiTexts.filter((t) => t.length > 0 && t !== "echo: hello");
    check(partial.some((t) => "echo: hello".startsWith(t)), "tokens were rendered before the end", probe.aiTexts);
    const body = runBodies()[0].body;
    check(body.stream_resumable === false && body.on_disconnect === "cancel", "plain submit options", body);
    return { messages: texts(stream), partial: partial.length };
  },

  // An interrupt shows up as `interrupt`; resuming it with a command ends the run.
  async interrupt() {
    const probe = chat();
    await settled(probe, "mounted");
    await probe.current.submit({ messages: [human("ASK about sunscreen")] });
    const asked = await waitFor(() => !probe.current.isLoading && probe.current.interrupt, "the interrupt");
    check(asked.value?.type === "clarification", "the clarification question", asked);
    await probe.current.submit(undefined, { command: { resume: "students" } });
    await waitFor(() => texts(probe.current).length === 2, "the answer after resuming");
    const stream = await settled(probe, "settled");
    check(texts(stream)[1] === "echo: ASK about sunscreen (answer: students)", "answer uses the resume value", texts(stream));
    check(stream.interrupt === undefined, "no interrupt left", stream.interrupt);
    const resume = runBodies()[1].body;
    check(resume.command?.resume === "students", "resume sent as a command", resume);
    check(typeof resume.checkpoint?.checkpoint_id === "string", "fetchStateHistory sends the head checkpoint", resume);
    return { messages: texts(stream), resume_checkpoint: resume.checkpoint };
  },

  // A second message on the same thread (fetchStateHistory: the body names the head).
  async second() {
    const probe = chat();
    await settled(probe, "mounted");
    await probe.current.submit({ messages: [human("first")] });
    await waitFor(() => texts(probe.current).length === 2 && !probe.current.isLoading, "first answer");
    await settled(probe, "history after the first run");
    await probe.current.submit({ messages: [human("second")] });
    await waitFor(() => texts(probe.current).length === 4, "second answer");
    const stream = await settled(probe, "settled");
    check(
      JSON.stringify(texts(stream)) === JSON.stringify(["first", "echo: first", "second", "echo: second"]),
      "both turns, in order",
      texts(stream),
    );
    const [first, second] = runBodies().map((r) => r.body);
    check(first.checkpoint === undefined, "the first submit names no checkpoint", first);
    check(typeof second.checkpoint?.checkpoint_id === "string", "the second names the head", second);
    check(second.checkpoint.thread_id === undefined, "useStream drops thread_id", second.checkpoint);
    check(stream.history.length >= 4, "history is loaded", stream.history.length);
    return { messages: texts(stream), checkpoint: second.checkpoint };
  },

  // A page reload mid-run: the new mount rejoins with Last-Event-ID -1 (every frame).
  async reconnect() {
    const first = chat({ reconnectOnMount: true });
    await settled(first, "mounted");
    let threadId;
    const submitted = first.current
      .submit({ messages: [human("SLOW CHAT 1.5 reload me")] }, { onDisconnect: "continue" })
      .catch(() => undefined);
    await waitFor(() => {
      const key = Object.keys(sessionStorage).find((k) => k.startsWith("lg:stream:"));
      threadId = key?.slice("lg:stream:".length);
      return threadId;
    }, "run id kept in sessionStorage");
    const runId = sessionStorage.getItem(`lg:stream:${threadId}`);
    first.unmount(); // the page goes away (no stop(): the run goes on)
    void submitted;
    const second = chat({ reconnectOnMount: true, threadId });
    await waitFor(() => texts(second.current).length === 2 && !second.current.isLoading, "the answer after rejoining");
    const stream = await settled(second, "settled");
    check(texts(stream)[1] === "echo: SLOW CHAT 1.5 reload me", "the rejoined answer", texts(stream));
    const join = requests.find((r) => r.method === "GET" && r.path.endsWith(`/runs/${runId}/stream`));
    check(join, "joined the run's stream", requests.map((r) => `${r.method} ${r.path}`));
    check(join.headers["last-event-id"] === "-1", "joined with Last-Event-ID -1", join.headers);
    check(runBodies()[0].body.stream_resumable === true, "reconnectOnMount asks for a resumable stream");
    check(sessionStorage.getItem(`lg:stream:${threadId}`) === null, "the run id is dropped once done");
    return { messages: texts(stream), run_id: runId };
  },

  // Edit a human message, then regenerate an answer: both fork from a checkpoint.
  async branch() {
    const probe = chat();
    await settled(probe, "mounted");
    await probe.current.submit({ messages: [human("original question")] });
    await waitFor(() => texts(probe.current).length === 2, "first answer");
    let stream = await settled(probe, "settled");

    // Edit (Agent Chat UI): submit the new text from the parent of the state that first had it.
    const humanMeta = stream.getMessagesMetadata(stream.messages[0], 0);
    const editFrom = humanMeta?.firstSeenState?.parent_checkpoint;
    check(editFrom?.checkpoint_id, "the edited message has a parent checkpoint", humanMeta);
    await stream.submit({ messages: [human("edited question")] }, { checkpoint: editFrom });
    await waitFor(() => texts(probe.current)[1] === "echo: edited question", "the edited branch's answer");
    stream = await settled(probe, "settled after edit");
    check(JSON.stringify(texts(stream)) === JSON.stringify(["edited question", "echo: edited question"]), "the edited branch", texts(stream));
    const edited = stream.getMessagesMetadata(stream.messages[0], 0);
    check(edited?.branchOptions?.length === 2, "two branches at the edited message", edited);

    // Regenerate (Agent Chat UI): re-run from the parent of the state that first had the answer.
    const aiBefore = stream.messages[1].id;
    const aiMeta = stream.getMessagesMetadata(stream.messages[1], 1);
    const regenerateFrom = aiMeta?.firstSeenState?.parent_checkpoint;
    check(regenerateFrom?.checkpoint_id, "the answer has a parent checkpoint", aiMeta);
    await stream.submit(undefined, { checkpoint: regenerateFrom });
    await waitFor(() => probe.current.messages[1]?.id !== aiBefore && !probe.current.isLoading, "a regenerated answer");
    stream = await settled(probe, "settled after regenerate");
    const regenerated = stream.getMessagesMetadata(stream.messages[1], 1);
    check(texts(stream)[1] === "echo: edited question", "regenerated answer", texts(stream));
    check(regenerated?.branchOptions?.length === 2, "two branches at the regenerated answer", regenerated);

    // Switch back to the original branch.
    stream.setBranch(edited.branchOptions.find((b) => b !== edited.branch));
    const original = await waitFor(() => texts(probe.current)[0] === "original question" && probe.current, "original branch");
    check(texts(original)[1] === "echo: original question", "the original branch is intact", texts(original));
    const bodies = runBodies().map((r) => r.body);
    check(bodies[1].checkpoint.checkpoint_id === editFrom.checkpoint_id, "edit sent its checkpoint", bodies[1]);
    check(bodies[2].input === undefined && bodies[2].checkpoint.checkpoint_id === regenerateFrom.checkpoint_id, "regenerate sent only a checkpoint", bodies[2]);
    return { branches: edited.branchOptions, regenerated: regenerated.branchOptions };
  },

  // Join a background run while it is running.
  async join() {
    const client = new Client({ apiUrl });
    const thread = await client.threads.create();
    const run = await client.runs.create(thread.thread_id, "chat", {
      input: { messages: [human("SLOW CHAT 1.0 join me")] },
      streamMode: ["values", "messages-tuple"],
    });
    const probe = chat({ threadId: thread.thread_id });
    await settled(probe, "mounted");
    const joined = probe.current.joinStream(run.run_id);
    await waitFor(() => probe.current.isLoading, "joined while running");
    await joined;
    const stream = await waitFor(
      () => texts(probe.current)[1] === "echo: SLOW CHAT 1.0 join me" && probe.current,
      "the joined answer",
    );
    const join = requests.find((r) => r.method === "GET" && r.path.endsWith(`/runs/${run.run_id}/stream`));
    check(join?.headers["last-event-id"] === "-1", "joinStream's default cursor is -1", join?.headers);
    const done = await client.runs.join(thread.thread_id, run.run_id);
    check(done.messages?.length === 2, "the run's result", done);
    const record = await client.runs.get(thread.thread_id, run.run_id);
    check(record.status === "success", "the run succeeded", record);
    return { messages: texts(stream) };
  },

  // The thread routes useStream does not call, through the SDK's Client.
  async client() {
    const client = new Client({ apiUrl });
    const thread = await client.threads.create();
    const tid = thread.thread_id;
    await client.runs.wait(tid, "chat", { input: { messages: [human("state please")] } });
    const head = await client.threads.getState(tid);
    check(head.values.messages.length === 2, "two messages", head.values);
    const byObject = await client.threads.getState(tid, head.checkpoint);
    const byId = await client.threads.getState(tid, head.checkpoint.checkpoint_id);
    check(byObject.checkpoint.checkpoint_id === head.checkpoint.checkpoint_id, "getState(checkpoint object)");
    check(byId.checkpoint.checkpoint_id === head.checkpoint.checkpoint_id, "getState(checkpoint id)");

    const updated = await client.threads.updateState(tid, {
      values: { messages: [{ type: "ai", content: "edited by hand", id: head.values.messages[1].id }] },
      asNode: "agent",
    });
    check(typeof updated.checkpoint?.checkpoint_id === "string", "updateState answers the checkpoint", updated);
    const after = await client.threads.getState(tid);
    check(after.checkpoint.checkpoint_id === updated.checkpoint.checkpoint_id, "the update is the head");
    check(after.values.messages[1].content === "edited by hand", "the reducer replaced the message", after.values);
    check(after.metadata.source === "update", "written as an update", after.metadata);

    const history = await client.threads.getHistory(tid, { limit: 50 });
    const updates = await client.threads.getHistory(tid, { metadata: { source: "update" } });
    check(updates.length === 1 && updates[0].checkpoint.checkpoint_id === updated.checkpoint.checkpoint_id, "history filtered by metadata", updates);
    const older = await client.threads.getHistory(tid, { before: head.checkpoint, limit: 50 });
    check(older.length === history.length - 2, "history before a checkpoint", [older.length, history.length]);
    const fromCheckpoint = await client.threads.getHistory(tid, { checkpoint: { checkpoint_id: head.checkpoint.checkpoint_id }, limit: 50 });
    check(fromCheckpoint[0].checkpoint.checkpoint_id === head.checkpoint.checkpoint_id, "history from a checkpoint", fromCheckpoint[0]);

    const copy = await client.threads.copy(tid);
    check(copy.thread_id !== tid, "a new thread id", copy);
    const copied = await client.threads.getState(copy.thread_id);
    check(JSON.stringify(copied.values) === JSON.stringify(after.values), "the copy has the same state");
    check((await client.threads.getHistory(copy.thread_id, { limit: 50 })).length === history.length, "and the same history");

    check((await client.threads.count()) >= 2, "threads.count");
    check((await client.assistants.count({ graphId: "chat" })) === 1, "assistants.count");

    const subgraphs = await client.assistants.getSubgraphs("studio");
    check(Object.keys(subgraphs).join() === "executor", "studio's subgraph", subgraphs);
    const one = await client.assistants.getSubgraphs("studio", { namespace: "executor" });
    check(Object.keys(one).join() === "executor" && one.executor.graph_id === "studio", "one namespace", one);

    const slow = await client.runs.create(tid, "chat", { input: { messages: [human("SLOW CHAT 5 cancel me")] } });
    await client.runs.cancel(tid, slow.run_id, true, "rollback");
    const gone = await client.runs.get(tid, slow.run_id).then(() => false, (e) => e.status === 404);
    check(gone, "a rollback deletes the run");
    const back = await client.threads.getState(tid);
    check(back.checkpoint.checkpoint_id === updated.checkpoint.checkpoint_id, "and its checkpoints", back.checkpoint);
    return { history: history.length, copy: copy.thread_id };
  },
};

try {
  if (!flows[flow]) throw new Error(`unknown flow ${flow}; flows: ${Object.keys(flows).join(", ")}`);
  const result = await flows[flow]();
  console.log(`RESULT ${JSON.stringify(result ?? {})}`);
  process.exit(0);
} catch (error) {
  console.error(error?.stack ?? String(error));
  process.exit(1);
}
