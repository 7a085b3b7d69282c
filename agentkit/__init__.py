"""What the studio's agents share: the layer below the nodes.

State and its channels (`state`), the run's services (`context`, opened by
`services`), loop bounds (`limits`), the pure routers (`routing`,
`pipeline_routing`), the run's start (`run_start`), the deterministic checks
(`checks`), the platform table and its checks (`platforms`, `platform_checks`),
the advertising-law words (`compliance`), adapting a post (`adaptation`), the
campaign planner's state (`campaign_plan`), the helpers agents call models and
tools with (`common`, `tools`) and the post helpers several agents read (`post`).
It imports no node and no wiring module (`graphs`); nodes import it, never each
other. Its data files are in `agentkit/rules/`.
"""
