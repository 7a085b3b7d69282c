// The flows of Agent Chat UI / Studio, driven through the SDK's own useStream hook
// (and, for the thread routes useStream does not call, the SDK's Client) against a
// running Atelier server. Usage: node flows.mjs <flow> <apiUrl>
//
// Each flow checks what a user would see (messages, interrupt, branches) and what
// the SDK sent (the fetch log), prints `RESULT <json>` and exits 0; any failed
// check throws, and node exits non-zero with the message.
//
// The `atelier-*` flows drive the product's own `atelier` graph (on a scripted
// model) mounted as Agent Chat UI mounts useStream: `messages` input, stream modes
// values + messages-tuple + custom, subgraphs, fetchStateHistory, reconnectOnMount
// (resumable streams). Usage: node flows.mjs atelier-<flow> <apiUrl> [apiKey]
import { Client } from "@langchain/langgraph-sdk";
import { check, mount, requests, texts, waitFor } from "./harness.mjs";

const [flow, apiUrl, apiKey] = process.argv.slice(2);
const keyed = apiKey ? { "X-Api-Key": apiKey } : undefined;
const human = (content) => ({ type: "human", content });
const runBodies = () => requests.filter((r) => r.method === "POST" && r.path.endsWith("/runs/stream"));

function chat(extra = {}) {
  return mount({ apiUrl, assistantId: "chat", fetchStateHistory: true, ...extra });
}

async function settled(probe, what, timeoutMs) {
  await waitFor(() => probe.current && !probe.current.isLoading && !probe.current.isThreadLoading, what, timeoutMs);
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

// ---------------------------------------------------------------------------
// The product's `atelier` graph, as Agent Chat UI drives it
// ---------------------------------------------------------------------------

let humanIds = 0;
/** A human message as Agent Chat UI's composer makes it: an id and text blocks. */
const composed = (text) => ({ id: `human-${process.pid}-${++humanIds}`, type: "human", content: [{ type: "text", text }] });
const LONG = 60000; // a whole pipeline run, on a loaded machine
/**
 * Wait until a run's end has reached useStream's history: after a run the hook
 * refetches the thread's history, and until that lands its head is a state from
 * the run's start (a message sent then would fork from there, as a user's would).
 */
async function ready(probe, what) {
  await settled(probe, what, LONG);
  const head = () => probe.current.history?.at(-1); // oldest first
  const ids = (state) => (state?.values?.messages ?? []).map((m) => m.id).join();
  await waitFor(() => head() && ids(head()) === ids(probe.current), `${what}: the history's head`, LONG);
  return probe.current;
}

/** Wait for `predicate`, or fail at once with the error a failed run left in useStream. */
async function until(probe, predicate, what) {
  const got = await waitFor(() => probe.current?.error || predicate(), what, LONG).catch((error) => {
    const s = probe.current;
    const seen = { loading: s.isLoading, messages: s.messages.map((m) => `${m.type}:${m.id}`), history: s.history?.length, requests: requests.slice(-6).map((r) => `${r.method} ${r.path}`) };
    throw new Error(`${error.message}\n${JSON.stringify(seen, null, 1)}`);
  });
  check(probe.current.error == null, `no error while waiting for ${what}`, String(probe.current.error));
  return got;
}

const CLEAR = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚";
const VAGUE = "写一篇笔记";

function studio(extra = {}) {
  return mount({
    apiUrl,
    assistantId: "atelier",
    defaultHeaders: keyed,
    fetchStateHistory: true,
    reconnectOnMount: true,
    onCustomEvent: () => {},
    ...extra,
  });
}

/** Send a message as Agent Chat UI's composer does (Thread's handleSubmit). */
async function send(stream, message, extra = {}) {
  await stream.submit(
    { messages: [message] },
    {
      streamMode: ["values"],
      streamSubgraphs: true,
      streamResumable: true,
      optimisticValues: (prev) => ({ ...prev, messages: [...(prev.messages ?? []), message] }),
      ...extra,
    },
  );
}

const text = (m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content));
const imageUrls = (m) => [...text(m).matchAll(/!\[[^\]]*\]\(([^)]+)\)/g)].map((x) => x[1]);

/** Check that a post message shows the post: a bold title and an image URL that loads keyless. */
async function checkPost(message) {
  check(message?.type === "ai", "the last message is the AI's", message);
  check(/^\*\*.+\*\*/.test(text(message)), "the post starts with its title", text(message));
  const [url] = imageUrls(message);
  check(url && url.startsWith(apiUrl), "an absolute image URL on this server", text(message));
  // As a browser's <img> does: no key. With API keys on, the link is signed.
  const image = await fetch(url);
  check(image.status === 200, "the image loads without a key", { url, status: image.status });
  if (keyed) {
    const bare = await fetch(url.split("?")[0]);
    check(bare.status === 401, "the unsigned link needs the key", { url, status: bare.status });
  }
  return url;
}

async function checkHistory(client, threadId) {
  const history = await client.threads.getHistory(threadId, { limit: 100 });
  check(history.length > 0, "the thread has history");
  const bare = history.filter((s) => !Array.isArray(s.values?.messages));
  check(bare.length === 0, "every history state carries messages", bare.map((s) => s.checkpoint));
  return history.length;
}

Object.assign(flows, {
  // A first message: the writer's tokens stream into one AI message that ends as the post.
  async "atelier-post"() {
    const ids = {};
    const probe = studio({ onThreadId: (id) => (ids.thread = id) });
    await settled(probe, "mounted", LONG);
    const message = composed(CLEAR);
    await send(probe.current, message);
    const stream = await ready(probe, "the post");
    check(stream.error == null, "no error", String(stream.error));
    const [mine, post, ...more] = stream.messages;
    check(more.length === 0 && mine.id === message.id, "the human message kept its id, one answer", stream.messages);
    const url = await checkPost(post);
    const streamed = probe.aiTexts.filter((t, i) => probe.aiIds[i] === post.id && t !== text(post));
    check(streamed.length > 0, "the post's message showed drafts before the post, under its id", probe.aiIds);
    const shownIds = new Set(probe.aiIds.filter(Boolean));
    check(shownIds.size === 1, "one AI message from first token to post (no flicker)", [...shownIds]);
    const body = runBodies()[0].body;
    for (const mode of ["values", "messages-tuple", "custom"]) {
      check(body.stream_mode.includes(mode), `stream mode ${mode}`, body.stream_mode);
    }
    check(body.stream_resumable === true && body.stream_subgraphs === true, "resumable, subgraphs", body);
    const client = new Client({ apiUrl, defaultHeaders: keyed });
    const threadId = ids.thread;
    const states = await checkHistory(client, threadId);
    const found = await client.threads.search({ metadata: { graph_id: "atelier" }, limit: 100 });
    const thread = found.find((t) => t.thread_id === threadId);
    check(thread?.metadata?.title === CLEAR, "threads.search shows the title", thread?.metadata);
    return { thread_id: threadId, post: text(post), image: url, states };
  },

  // A vague message: the question as an AI message and a HITL interrupt; approve resumes.
  async "atelier-question"() {
    const probe = studio();
    await settled(probe, "mounted", LONG);
    await send(probe.current, composed(VAGUE));
    const asked = await waitFor(() => !probe.current.isLoading && probe.current.interrupt, "the question", LONG);
    await ready(probe, "the question");
    const hitl = asked.value;
    check(hitl.action_requests?.[0]?.name === "clarify_request" && hitl.action_requests[0].args, "an action request", hitl);
    check(hitl.review_configs?.[0]?.action_name === "clarify_request", "its review config", hitl);
    const allowed = hitl.review_configs[0].allowed_decisions ?? hitl.review_configs[0].allowedDecisions;
    check(["approve", "edit", "reject"].every((d) => allowed.includes(d)), "approve, edit, reject", hitl);
    const question = probe.current.messages.at(-1);
    check(question.type === "ai" && text(question) === hitl.action_requests[0].description, "the question is an AI message", probe.current.messages);
    // Agent Chat UI's approve: no input, the decision as command.resume.
    await probe.current.submit({}, { command: { resume: { decisions: [{ type: "approve" }] } }, streamResumable: true });
    const stream = await ready(probe, "the post after approving");
    check(stream.interrupt === undefined, "no interrupt left", stream.interrupt);
    await checkPost(stream.messages.at(-1));
    const resume = runBodies()[1].body;
    check(JSON.stringify(resume.input) === "{}" && resume.command.resume.decisions[0].type === "approve", "input {} with the command", resume);

    // On a second thread, a message typed in the composer answers the question.
    const typed = studio();
    await settled(typed, "mounted again", LONG);
    await send(typed.current, composed(VAGUE));
    await waitFor(() => !typed.current.isLoading && typed.current.interrupt, "the second question", LONG);
    await ready(typed, "the second question");
    await send(typed.current, composed("写给大学新生，讲清楚平价护肤的成分"));
    const answered = await ready(typed, "the post after a typed answer");
    check(answered.interrupt === undefined, "the typed answer resumed the run", answered.interrupt);
    const kinds = answered.messages.map((m) => m.type).join();
    check(kinds === "human,ai,human,ai", "question, answer, post", answered.messages);
    await checkPost(answered.messages.at(-1));
    return { question: hitl.action_requests[0].description };
  },

  // A second message revises the post: a second post follows, written from the first.
  async "atelier-revise"() {
    const probe = studio();
    await settled(probe, "mounted", LONG);
    await send(probe.current, composed(CLEAR));
    let stream = await ready(probe, "the first post");
    const first = stream.messages.at(-1);
    await send(stream, composed("标题短一点"));
    await until(probe, () => probe.current.messages.length === 4 && !probe.current.isLoading, "the revised post");
    stream = await ready(probe, "settled");
    check(stream.messages.map((m) => m.type).join() === "human,ai,human,ai", "two turns", stream.messages);
    check(stream.messages[1].id === first.id && text(stream.messages[1]) === text(first), "the first post stays", stream.messages);
    await checkPost(stream.messages[3]);
    const body = runBodies()[1].body;
    check(typeof body.checkpoint?.checkpoint_id === "string", "the second message names the head", body);
    const title = text(first).match(/^\*\*(.+?)\*\*/)[1];
    return { previous_title: title };
  },

  // Edit-and-resend forks from the message's checkpoint; regenerate writes a new attempt.
  async "atelier-branch"() {
    const ids = {};
    const probe = studio({ onThreadId: (id) => (ids.thread = id) });
    await settled(probe, "mounted", LONG);
    await send(probe.current, composed(CLEAR));
    await ready(probe, "the first post");
    await send(probe.current, composed("标题短一点"));
    await until(probe, () => probe.current.messages.length === 4 && !probe.current.isLoading, "the second post");
    let stream = await ready(probe, "settled");

    // Edit the second message (Agent Chat UI's HumanMessage edit).
    const meta = stream.getMessagesMetadata(stream.messages[2], 2);
    const editFrom = meta?.firstSeenState?.parent_checkpoint;
    check(editFrom?.checkpoint_id, "the edited message has a parent checkpoint", meta);
    const edited = composed("标题再短一点，加一个表情");
    await send(stream, edited, { checkpoint: editFrom });
    await until(probe, () => probe.current.messages[2]?.id === edited.id && probe.current.messages.length === 4 && !probe.current.isLoading, "the edited branch");
    stream = await ready(probe, "settled after edit");
    check(stream.messages[2].id === edited.id, "the edited message replaces the second", stream.messages);
    const client = new Client({ apiUrl, defaultHeaders: keyed });
    const forks = async (from) => {
      const history = await client.threads.getHistory(ids.thread, { limit: 200 });
      return history.filter((s) => s.parent_checkpoint?.checkpoint_id === from.checkpoint_id).length;
    };
    check((await forks(editFrom)) === 2, "the edit forked from the message's parent checkpoint");
    await checkPost(stream.messages[3]);
    // Agent Chat UI's BranchSwitcher: the edited message offers both versions.
    const editedMeta = stream.getMessagesMetadata(stream.messages[2], 2);
    check(editedMeta?.branchOptions?.length === 2 && editedMeta.branchOptions.includes(editedMeta.branch), "two branches at the edited message", { branch: editedMeta?.branch, options: editedMeta?.branchOptions, states: stream.history?.length });

    // Regenerate the post (Agent Chat UI's AssistantMessage regenerate): a new attempt.
    const before = stream.messages[3].id;
    const aiMeta = stream.getMessagesMetadata(stream.messages[3], 3);
    const regenerateFrom = aiMeta?.firstSeenState?.parent_checkpoint;
    check(regenerateFrom?.checkpoint_id, "the post has a parent checkpoint", aiMeta);
    await stream.submit(undefined, { checkpoint: regenerateFrom, streamMode: ["values"], streamSubgraphs: true, streamResumable: true });
    await until(probe, () => probe.current.messages[3]?.id !== before && !probe.current.isLoading, "a regenerated post");
    stream = await ready(probe, "settled after regenerate");
    check(stream.messages.length === 4, "still one post for the message", stream.messages);
    await checkPost(stream.messages[3]);
    check((await forks(regenerateFrom)) === 2, "the regenerate forked from the post's parent checkpoint");
    const regenerated = stream.getMessagesMetadata(stream.messages[3], 3);
    check(regenerated?.branchOptions?.length === 2, "two branches at the regenerated post", { branch: regenerated?.branch, options: regenerated?.branchOptions });
    const runs = await client.runs.list(ids.thread);
    check(runs.length === 4 && runs.every((r) => r.status === "success"), "four runs, all successful", runs);

    // Switching the edited message back shows the original second turn, post included.
    const again = stream.getMessagesMetadata(stream.messages[2], 2);
    check(again?.branchOptions?.length === 2, "the edit's branches are still offered", { branch: again?.branch, options: again?.branchOptions });
    stream.setBranch(again.branchOptions.find((b) => b !== again.branch));
    const original = await waitFor(() => probe.current.messages[2]?.id !== edited.id && probe.current, "the original branch");
    const said = (m) => (typeof m.content === "string" ? m.content : m.content.map((b) => b.text ?? "").join(""));
    check(said(original.messages[2]) === "标题短一点" && original.messages.length === 4, "the original message and its post", original.messages);
    await checkPost(original.messages[3]);
    return { edit_from: editFrom.checkpoint_id, regenerate_from: regenerateFrom.checkpoint_id };
  },
});

// The Store through the SDK's Client (issue 25): put, get, search by filter and by query,
// list namespaces, delete; a second API key sees none of it.
// Usage: node flows.mjs store <apiUrl> <apiKey> <otherApiKey> <namespaceRoot>
Object.assign(flows, {
  async store() {
    const [otherKey, root] = process.argv.slice(5);
    const client = new Client({ apiUrl, defaultHeaders: keyed });
    const other = new Client({ apiUrl, defaultHeaders: { "X-Api-Key": otherKey } });
    const memory = [root, "memory"];
    await client.store.putItem(memory, "coffee", { text: "咖啡 拿铁 咖啡", kind: "menu" });
    await client.store.putItem(memory, "skin", { text: "护肤 面霜", kind: "voice" });
    await client.store.putItem([root, "facts"], "trip", { text: "旅行", kind: "menu" }, { ttl: 60 });

    const item = await client.store.getItem(memory, "coffee", { refreshTtl: true });
    check(item?.value?.kind === "menu" && item.namespace.join("/") === memory.join("/"), "the item", item);
    check(typeof item.createdAt === "string", "its timestamps", item);
    const menu = await client.store.searchItems([root], { filter: { kind: "menu" } });
    const menuKeys = menu.items.map((i) => i.key).sort();
    check(menuKeys.join() === "coffee,trip", "the filter", menu.items);
    const ranked = await client.store.searchItems([root], { query: "咖啡", limit: 2 });
    check(ranked.items[0]?.key === "coffee" && typeof ranked.items[0].score === "number", "the query ranks", ranked.items);
    const spaces = await client.store.listNamespaces({ prefix: [root] });
    const names = spaces.namespaces.map((ns) => ns.join("/"));
    check(names.join() === `${root}/facts,${root}/memory`, "the namespaces", spaces);
    const shallow = await client.store.listNamespaces({ prefix: [root], maxDepth: 1 });
    check(shallow.namespaces.length === 1 && shallow.namespaces[0].length === 1, "max depth", shallow);

    check((await other.store.getItem(memory, "coffee")) === null, "another key gets nothing");
    check((await other.store.searchItems([root])).items.length === 0, "another key finds nothing");
    check((await other.store.listNamespaces({ prefix: [root] })).namespaces.length === 0, "another key lists nothing");

    await client.store.deleteItem(memory, "coffee");
    check((await client.store.getItem(memory, "coffee")) === null, "deleted");
    let refused = null;
    try {
      await client.store.putItem([root, ""], "k", {});
    } catch (error) {
      refused = error;
    }
    check(refused && String(refused.status ?? refused.message).includes("422"), "an empty label is a 422", String(refused));
    return { ranked: ranked.items.map((i) => i.key), namespaces: names };
  },
});

// Brand presets (issue 25): an `atelier` assistant's context, created, versioned, rolled
// back and deleted through the SDK's Client; a run with its id writes for the brand.
// Usage: node flows.mjs assistants-preset <apiUrl> <apiKey> <otherApiKey>
const PRESET_REQUEST = "写一篇小红书笔记：平价护肤，学生党友好，重点成分讲清楚";
Object.assign(flows, {
  async "assistants-preset"() {
    const otherKey = process.argv[5];
    const client = new Client({ apiUrl, defaultHeaders: keyed });
    const other = new Client({ apiUrl, defaultHeaders: { "X-Api-Key": otherKey } });
    const input = { request: PRESET_REQUEST, auto_confirm: true, fast_mode: true };
    const preset = (voice) => ({ brand_name: "JS 青禾", voice, must_include: ["氨基酸"], must_avoid: ["营销"] });
    const status = async (call) => {
      try {
        await call();
        return 200;
      } catch (error) {
        return error.status;
      }
    };
    const run = async (assistantId) => {
      const thread = await client.threads.create();
      const values = await client.runs.wait(thread.thread_id, assistantId, { input });
      return { thread: thread.thread_id, values };
    };

    const created = await client.assistants.create({ graphId: "atelier", context: preset("JS第一版"), metadata: { brand: "js-brand" }, name: "JS 青禾" });
    check(created.version === 1 && created.graph_id === "atelier", "version 1 of an atelier assistant", created);
    const id = created.assistant_id;
    const first = await run(id);
    check(first.values.brand?.voice === "JS第一版", "the run writes for the preset", first.values.brand);
    // Started with `request`, not chat input: the thread still opens with what was asked.
    const [asked, ...answers] = first.values.messages;
    check(asked?.type === "human" && asked.content === PRESET_REQUEST && asked.id?.startsWith("request-"), "messages[0] is the human request", first.values.messages);
    check(answers.map((m) => m.type).join() === "ai", "then the post", answers);
    const avoided = first.values.verdict.checks.find((c) => c.name === "must_avoid");
    check(avoided && avoided.passed === false, "the critic fails the must-avoid term", first.values.verdict.checks);

    const updated = await client.assistants.update(id, { context: preset("JS第二版") });
    check(updated.version === 2, "an update is version 2", updated);
    const second = await run(id);
    check(second.values.brand.voice === "JS第二版", "the next run uses version 2", second.values.brand);
    const latest = await client.assistants.setLatest(id, 1);
    check(latest.version === 1, "setLatest(1)", latest);
    const third = await run(id);
    check(third.values.brand.voice === "JS第一版", "the next run uses version 1 again", third.values.brand);

    const versions = await client.assistants.getVersions(id);
    check(versions.map((v) => v.version).join() === "2,1", "getVersions lists both", versions);
    const found = await client.assistants.search({ metadata: { brand: "js-brand" } });
    check(found.length === 1 && found[0].assistant_id === id && found[0].version === 1, "search by metadata", found);
    check((await client.assistants.count({ metadata: { brand: "js-brand" } })) === 1, "count by metadata");
    const schemas = await client.assistants.getSchemas(id);
    check("voice" in schemas.context_schema.properties, "the context schema is a preset's", schemas.context_schema);

    check((await status(() => other.assistants.get(id))) === 404, "another key gets 404");
    check((await other.assistants.search({ metadata: { brand: "js-brand" } })).length === 0, "another key finds none");
    check((await status(() => other.assistants.delete(id))) === 404, "another key cannot delete it");
    check((await status(() => client.assistants.update("atelier", { name: "x" }))) === 409, "a built-in assistant is read-only");

    await client.assistants.delete(id);
    check((await status(() => client.assistants.get(id))) === 404, "deleted: 404");
    const state = await client.threads.getState(first.thread);
    check(state.values.brand.voice === "JS第一版", "its runs' threads stay readable", state.values.brand);
    const runs = await client.runs.list(first.thread);
    check(runs.length === 1 && runs[0].assistant_id === id, "the run names the assistant", runs);
    return { assistant_id: id, voices: [first, second, third].map((r) => r.values.brand.voice) };
  },
});

try {
  if (!flows[flow]) throw new Error(`unknown flow ${flow}; flows: ${Object.keys(flows).join(", ")}`);
  const result = await flows[flow]();
  console.log(`RESULT ${JSON.stringify(result ?? {})}`);
  process.exit(0);
} catch (error) {
  console.error(error?.stack ?? String(error));
  process.exit(1);
}
