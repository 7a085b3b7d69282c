"""How a platform's rules and the advertising-law words read in the writer's prompt.

The rules themselves are data (`agentkit/rules/platforms.toml`, `agentkit/rules/ad_law.toml`);
`agentkit.platforms.writer_rules` and `agentkit.compliance.writer_rules` fill these
templates with them, so the writer is told exactly what the critic's code checks.
"""

PLATFORM_HEADER = "{name}平台规则（由代码逐项核对）："
FORM = "体裁：{form}"
FORMAT = "版式：{format}"
TITLE_NONE = "没有单独的标题栏：标题行会作为正文第一行一起发布，计入总长度"
TITLE_REQUIRED = "必须有标题"
TITLE_MAX = "标题最多 {n} 个字符"
BODY_RANGE = "正文长度：{range} 个字符"
TEXT_MAX = "全文（标题行、正文和标签合计）最多 {n} 个字符"
TAGS_RANGE = "话题标签：{range} 个"
TAG_FORMAT = "标签在正文里写成 {example}"
IMAGES_NONE = "不配图"
IMAGES_RANGE = "图片：{range} 张"
HEADINGS_MIN = "正文至少 {n} 个小标题（## 开头的行）"
SHOTS = "至少 {n} 个镜头，每个镜头都要有「口播：」和「字幕：」两行，字幕每条最多 {onscreen} 个字符"
THREAD = "串推每条最多 {n}（按 X 的计数），最多 {posts} 条，条与条之间单独一行 ---"
COUNTING = {
    "graphemes": "字符数：每个汉字、字母、数字、标点、emoji 算 1，空白不算",
    "graphemes_with_spaces": "字符数：每个汉字、字母、数字、标点、emoji 和空格、换行都算 1",
    "x_weighted": "X 的计数：英文字母、数字、常用标点算 1，汉字和 emoji 算 2，链接算 23",
}

COMPLIANCE_HEADER = "广告合规（由代码逐项核对，出现即不合格）：不得使用下列词语（含变体）："
COMPLIANCE_RULE = "- {label}（{law}）：{words}"
COMPLIANCE_ALLOWED = "不算违规的用法：{examples}"
