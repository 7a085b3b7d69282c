// Mount the SDK's own React hook, `useStream`, in a DOM from jsdom — no browser.
//
// The hook runs unmodified under React 19 + react-dom; the page's `window` and
// `sessionStorage` come from jsdom (useStream's `reconnectOnMount` keeps the run id
// there), while the SDK's requests go through Node's own `fetch`. The fetch log
// records what the SDK sent (method, path, headers, JSON body) without changing it.
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!doctype html><html><body></body></html>", {
  url: "http://localhost/",
});
globalThis.window = dom.window;
globalThis.document = dom.window.document;
globalThis.sessionStorage = dom.window.sessionStorage;
if (globalThis.navigator === undefined) globalThis.navigator = dom.window.navigator; // Node 20 has none
globalThis.IS_REACT_ACT_ENVIRONMENT = false; // updates arrive as in a browser, not in act()

export const requests = [];
const nodeFetch = globalThis.fetch;
globalThis.fetch = async (input, init = {}) => {
  const url = new URL(typeof input === "string" ? input : input.url);
  const headers = Object.fromEntries(new Headers(init.headers ?? {}).entries());
  let body;
  if (typeof init.body === "string") {
    try {
      body = JSON.parse(init.body);
    } catch {
      body = init.body;
    }
  }
  requests.push({ method: init.method ?? "GET", path: url.pathname, search: url.search, headers, body });
  return nodeFetch(input, init);
};

const React = await import("react");
const { createRoot } = await import("react-dom/client");
const { useStream } = await import("@langchain/langgraph-sdk/react");

/** Mount a component that calls useStream(options) and keeps its latest return value. */
export function mount(options) {
  const probe = { current: null, renders: 0, aiTexts: [], aiIds: [] };
  function Probe() {
    const stream = useStream(options);
    // Read what a chat UI reads, so the hook asks for the same stream modes.
    const messages = stream.messages;
    void stream.values;
    void stream.interrupt;
    const last = messages.at(-1);
    if (last && (last.type === "ai" || last.type === "AIMessageChunk")) {
      probe.aiTexts.push(typeof last.content === "string" ? last.content : JSON.stringify(last.content));
      probe.aiIds.push(last.id);
    }
    probe.current = stream;
    probe.renders += 1;
    return null;
  }
  const container = document.createElement("div");
  document.body.appendChild(container);
  const root = createRoot(container);
  root.render(React.createElement(Probe));
  probe.unmount = () => root.unmount();
  return probe;
}

/** Wait until `predicate()` is truthy (polling); fail with `what` after `timeoutMs`. */
export async function waitFor(predicate, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let value;
    try {
      value = predicate();
    } catch {
      value = undefined;
    }
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export function check(condition, message, detail) {
  if (!condition) {
    const extra = detail === undefined ? "" : `\n${JSON.stringify(detail, null, 2)}`;
    throw new Error(`check failed: ${message}${extra}`);
  }
}

/** The text of each message of a useStream, in order. */
export function texts(stream) {
  return stream.messages.map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content)));
}
