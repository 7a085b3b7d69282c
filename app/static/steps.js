// Steps that ran together (PRODUCT.md §1.2, issue 28). A `supervisor.route` event may name
// `parallel_agents`, started together with `next_agent`, and say it was `planned`: taken
// from the supervisor's plan without asking its model again. The routes log shows such a
// step as one line naming every agent, with labels in both languages as the console's.
// Loaded before console.js, whose `lang` and `named` it uses when a route is shown.

const STEP_LABELS = {
  zh: { together: "同时进行", planned: "按计划" },
  en: { together: "together", planned: "planned" },
};

function stepLabel(key) {
  return (STEP_LABELS[lang] || STEP_LABELS.zh)[key];
}

// The routes log line of a supervisor.route event: { text, tag, together }.
function routeLine(ev) {
  const agents = [ev.next_agent, ...(ev.parallel_agents || [])].map((a) => named("agent", a));
  const together = agents.length > 1;
  const text = together
    ? `⇉ ${agents.join(" ‖ ")} · ${stepLabel("together")}`
    : `→ ${agents[0]}`;
  const tag = ev.planned ? `#${ev.step} · ${stepLabel("planned")}` : `#${ev.step}`;
  return { text, tag, together };
}
