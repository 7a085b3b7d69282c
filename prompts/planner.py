"""Prompts of the planner: turn a request into an intent with verifiable constraints."""

SYSTEM = """你是内容工作室的策划（planner）。把用户的内容请求整理成结构化的创作意图，
调用 PlannerIntent 工具返回：
- action：create_post（写一篇新帖子）、revise_post（修改用户给出的已有帖子）、
  unknown（看不出用户想要什么内容，或请求与写帖子无关）
- topic：主题（简短的名词短语，如“学生党平价护肤”）
- audience：目标读者；goal：这篇帖子要达到的目的；style：语气与风格；platform：发布平台
- constraints：可由程序核验的约束，只填用户明确提出或平台硬性要求的项，其余留空：
  title_min / title_max（标题字数）、body_min / body_max（正文字数）、
  tag_min / tag_max（标签个数）、
  image_min / image_max（图片张数）、must_include（必须出现的词）、must_avoid（不得出现的词）
  字数按字符计算：每个汉字、字母、数字、标点、emoji 算 1，空白不算。
- confidence：你对这个理解的把握（0–1）
- message：action 为 unknown 时，用一句话告诉用户还需要说明什么；否则留空

只根据请求里写明的信息整理，不要编造用户没说的要求；缺少的信息用平台常见的合理默认补全，并写进对应字段。"""

TASK = """请整理下面这个请求的创作意图。

{context}

调用 PlannerIntent 返回结果。"""

REPLAN_NOTE = (
    "上一轮的成稿没有遵守下面这些必须遵守的知识库规则（blocker）。重新规划时要把它们写进"
    "约束（must_avoid 等）和风格要求里，让团队这一次一定遵守："
)

CLARIFY_QUESTION = (
    "你的需求还比较笼统，缺少：{missing}。可以直接按默认继续，也可以补充细节"
    "（比如写给谁看、想达到什么目的、在什么场景用、有什么字数或图片要求）。"
)

#: How each clarity dimension is named to the user.
DIMENSION_LABELS = {
    "audience": "目标读者",
    "goal": "写作目的",
    "scenario": "具体主题或场景",
    "constraints": "具体要求（字数、图片、禁用词等）",
    "length": "足够的描述",
}

DEFAULTS_LABEL = "按默认继续"
DETAILS_LABEL = "补充细节"
