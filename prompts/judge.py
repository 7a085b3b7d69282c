"""Prompts of the evaluation judge: the pairwise comparison, the absolute score, the rubric lines.

The judge is its own role (`judge`), independent of the critic. What it judges against
is a rubric code builds (`agentkit.rubric`) from these lines; the brief, the rubric, the
reference post and the posts themselves reach the prompt only as data blocks
(`prompts.common.data_block`). See docs/evaluate-internals.md.
"""

PAIRWISE_SYSTEM = """你是独立的内容评审（judge），比较为同一个任务写的两篇{platform}帖子，
判断哪一篇更好。
两篇帖子标为“帖子1”和“帖子2”。编号是随机的，与作者、写作先后和质量都无关：不要因为位置偏向任何一篇。
按“评判标准”逐项比较；有“参考帖子”时，以它为水准的参照。篇幅更长不等于更好。

调用 PairwiseVerdict 工具回答：
- winner：1（帖子1更好）、2（帖子2更好）或 tie（不相上下）
- reasons：具体理由，说出决定胜负的差别"""

PAIRWISE_TASK = """请比较下面两篇帖子。

{context}

调用 PairwiseVerdict 给出结论。"""

POST_SYSTEM = """你是独立的内容评审（judge），按评判标准给一篇已经完成的{platform}帖子打分。
按“评判标准”逐项衡量；有“参考帖子”时，以它为水准的参照。篇幅更长不等于更好。

调用 PostScore 工具回答：
- score：0–1 的总分。0.9 以上：出色，可直接发布；0.7：合格；0.5：勉强，需要修改；0.3 以下：不合格
- reasons：具体理由，说出得分和扣分的地方"""

POST_TASK = """请给下面这篇帖子打分。

{context}

调用 PostScore 给出结论。"""

#: Added to the task when the judge's previous answer could not be used.
RETRY = "上一次的回答无效（{problem}）。请只调用 {tool} 工具，按要求填写每一项。"

# --- the rubric's lines (agentkit.rubric.build_rubric), in this order ------------------
RUBRIC_FULFIL = "切题：完成任务简报中的请求，主题、目的和要点都要覆盖。"
RUBRIC_BRAND = "品牌：以「{brand_name}」的身份写作。"
RUBRIC_VOICE = "语气：符合品牌的语气和风格——{voice}"
RUBRIC_AUDIENCE = "读者：写给{audience}，用他们的语言，回答他们关心的问题。"
RUBRIC_PLATFORM = "平台：符合{platform}的平台规则（见“平台规则”）。"
RUBRIC_REFERENCE = "参考：以“参考帖子”为水准和方向的参照，不要求照抄。"
RUBRIC_NOTES = "评审备注：{notes}"
RUBRIC_QUALITY = "质量：信息具体可信、结构清楚、读起来顺，没有空话、套话和凑字数。"
