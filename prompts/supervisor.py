"""Prompt of the supervisor, which routes the team: the next agent, and may plan ahead.

The roster and the dependency rules are rendered from the agent table
(`core.agents`): an agent's `duty` is its roster line, and each agent that
`needs` another gets the rule naming that agent's output (`done_when`).
`SYSTEM` leaves `{short_names}` to the supervisor node: the short names a plan
uses, which routing reads (`agentkit.routing.PLAN_NAMES`).
"""

from core.agents import AGENT_TABLE

#: The team, one line per agent, in the normal order.
ROSTER = "\n".join(f"- {agent.name}：{agent.duty}" for agent in AGENT_TABLE.values())

#: The preconditions routing enforces (`agentkit.routing.check_basic_preconditions`).
_NEEDS = [
    f"{agent.name} 需要先有{AGENT_TABLE[agent.needs].output_label}"
    f"（{AGENT_TABLE[agent.needs].done_when}）。"
    for agent in AGENT_TABLE.values()
    if agent.needs is not None
]
#: The rules that are not preconditions: when END is allowed, and how to use review and notes.
_OTHER_RULES = [
    "只有正文已写好、且审核（若有）通过并且各维度分数都达标时才能选 END。",
    "审核未通过时，根据问题和最低分维度安排相应的智能体修改，不要重复无效的工作。",
    "知识库中的 blocker（阻塞）笔记必须被遵守，要把它写进指示里。",
]
RULES = "\n".join(f"{n}. {rule}" for n, rule in enumerate([*_NEEDS, *_OTHER_RULES], 1))

SYSTEM = f"""你是内容工作室的主管（supervisor），负责调度一个创作团队完成一篇社交平台图文帖子。
每一轮你只决定下一位由谁工作，并调用 SupervisorDecision 工具给出决定：
- next_agent：下一位智能体的名字，或 END（全部完成时）
- guidance：给它的具体指示（要做什么、注意什么）
- context_from_previous：它需要知道的上一步结论
- focus_areas：需要重点关注的方面（列表）
- parallel_agents（可选）：与 next_agent 同时开始的其他智能体（它们需要的输入都已具备）
- plan（可选）：之后按顺序执行的步骤，每步是一个智能体名，或同时执行的智能体名列表，最后可写 END；
  计划会一直执行，直到结束、某一步没有可用产出、审核未通过或被规则拦下时才再问你
  parallel_agents 和 plan 里用简称，依次对应下面的团队成员：{{short_names}}
需要查阅知识库时，可以先调用 search_knowledge。

团队成员：
{ROSTER}

依赖规则：
{RULES}"""

# The suggestion closes the turn again: a small local model (SmolLM2-135M, greedy)
# copies the last tokens it read and follows it there, but not from mid-prompt.
TURN = """第 {step} / {max_steps} 轮决策。

阶段状态：
{stage_status}
按常规顺序，下一步建议：{suggested}（可以根据情况另选）

上一步的指示：{last_guidance}
{notice}
{errors}
{context}

请调用 SupervisorDecision 给出下一步。建议 next_agent：{suggested}"""

#: Names the context sections shown earlier in this team run and unchanged since.
UNCHANGED = "（{sections} 与之前相同，不再重复）"

#: Shown when agents' last outputs could not be parsed, so the supervisor can react.
ERRORS = "这些智能体上一次没有产出可用结果：{errors}"
