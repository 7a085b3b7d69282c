"""The platforms Atelier writes for and their rules, loaded from data (docs/platforms.md).

The rules live in `agentkit/rules/platforms.toml`, each with its source; this module
reads them once into a typed table (`PLATFORMS`, `PlatformRules`) that every agent
shares:

- the run's input accepts exactly these ids (`PlatformId`, used by
  `agentkit.state.PipelineInput.platform` and the brand preset's `platform`);
- the planner turns a model's guess ("小红书", "Twitter") into an id
  (`canonical_platform`);
- the writer is told its platform's rules (`writer_rules`);
- the critic checks them by code (`agentkit.platform_checks.check_platform`).

Pure data and functions: this module imports nothing of the product but the
prompt templates, so every agentkit module may use it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from prompts import platforms as prompt

#: Where the table is.
DATA_FILE = Path(__file__).resolve().parent / "rules" / "platforms.toml"

#: How a platform counts a length (`agentkit.platform_checks.length_of`).
Counting = Literal["graphemes", "graphemes_with_spaces", "x_weighted"]
#: Whether a platform's posts have a title field.
TitleRule = Literal["required", "optional", "none"]

Length = Annotated[int, Field(ge=0, le=100_000)]
Count = Annotated[int, Field(ge=0, le=100)]


class PlatformRules(BaseModel):
    """One platform's rules (see the data file's header for each key)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="The platform's id, as the input's `platform` takes it.")
    name: str = Field(description="Its name in Chinese.", examples=["小红书"])
    name_en: str = Field(description="Its name in English.", examples=["Xiaohongshu (RED)"])
    form: str = Field(default="", description="What a post there is, in a few words.")
    counting: Counting = "graphemes"
    title: TitleRule = "optional"
    title_max: Length | None = None
    body_min: Length | None = None
    body_max: Length | None = None
    text_max: Length | None = None
    tags_min: Count | None = None
    tags_max: Count | None = None
    tag_format: str = "#{tag}"
    images_min: Count | None = None
    images_max: Count | None = None
    headings_min: Count | None = None
    shots_min: Count | None = None
    onscreen_max: Length | None = None
    thread_post_max: Length | None = None
    thread_posts_max: Count | None = None
    format: str = ""
    sources: tuple[str, ...] = ()
    editorial: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        # A table that can never pass is a bug in the data file: fail at load.
        for low, high in (
            ("body_min", "body_max"),
            ("tags_min", "tags_max"),
            ("images_min", "images_max"),
        ):
            a, b = getattr(self, low), getattr(self, high)
            if a is not None and b is not None and a > b:
                raise ValueError(f"{self.id}: {low} ({a}) is greater than {high} ({b})")
        if "{tag}" not in self.tag_format:
            raise ValueError(f"{self.id}: tag_format must contain {{tag}}")
        if (self.thread_post_max is None) != (self.thread_posts_max is None):
            raise ValueError(f"{self.id}: thread_post_max and thread_posts_max go together")
        if self.title == "none" and self.title_max is not None:
            raise ValueError(f"{self.id}: a platform without a title has no title_max")
        if not self.sources:
            raise ValueError(f"{self.id}: every platform's rules name their sources")
        return self

    @property
    def takes_images(self) -> bool:
        """Tell whether a post for this platform may carry images."""
        return self.images_max is None or self.images_max > 0

    def tag_text(self, tag: str) -> str:
        """Return a tag as this platform writes it in the text (`#护肤`, Weibo `#护肤#`)."""
        return self.tag_format.replace("{tag}", tag)


def load_platforms(path: Path = DATA_FILE) -> dict[str, PlatformRules]:
    """Read and validate a platform table.

    Raises:
        ValueError: The file breaks a rule of `PlatformRules` (pydantic's message).
    """
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    table = data.get("platforms")
    if not isinstance(table, dict) or not table:
        raise ValueError(f"{path.name}: no [platforms.<id>] tables")
    return {key: PlatformRules.model_validate({**value, "id": key}) for key, value in table.items()}


@cache
def _table() -> Mapping[str, PlatformRules]:
    return load_platforms()


#: Every platform, by id, in the data file's order.
PLATFORMS: Mapping[str, PlatformRules] = _table()
#: The ids the input's `platform` accepts.
PLATFORM_IDS: tuple[str, ...] = tuple(PLATFORMS)
#: Platforms whose posts carry at least one #tag (the prose check `tags_present`).
TAGGED_PLATFORMS: frozenset[str] = frozenset(
    key for key, rules in PLATFORMS.items() if (rules.tags_min or 0) >= 1
)

#: What people and models call the platforms, folded (`canonical_platform`).
_ALIASES: dict[str, str] = {
    "小红书": "xiaohongshu",
    "红书": "xiaohongshu",
    "rednote": "xiaohongshu",
    "xhs": "xiaohongshu",
    "微博": "weibo",
    "新浪微博": "weibo",
    "sinaweibo": "weibo",
    "公众号": "wechat",
    "微信公众号": "wechat",
    "微信": "wechat",
    "weixin": "wechat",
    "抖音": "douyin",
    "知乎": "zhihu",
    "twitter": "x",
    "推特": "x",
    "领英": "linkedin",
}


def canonical_platform(name: Any) -> str | None:
    """Return the platform id a name means ("小红书", " Weibo ", "Twitter"), or None.

    Ids, Chinese and English names and common aliases are recognised, in any case
    and with spaces ignored; anything else (a number, "", an unknown platform) is
    None.
    """
    if not isinstance(name, str):
        return None
    key = "".join(name.split()).casefold()
    if key in PLATFORMS:
        return key
    for platform, rules in PLATFORMS.items():
        if key in (
            "".join(rules.name.split()).casefold(),
            "".join(rules.name_en.split()).casefold(),
        ):
            return platform
    return _ALIASES.get(key)


def platform_rules(platform: str | None) -> PlatformRules | None:
    """Return a platform's rules by id (or alias); None for an unknown platform."""
    found = canonical_platform(platform)
    return PLATFORMS[found] if found else None


def hard_limits(platform: str | None) -> dict[str, int]:
    """Return a platform's title and body limits as verifiable constraints.

    Only where the platform counts as `agentkit.checks.count_chars` does (the
    constraint checks' rule): X's weighted count and LinkedIn's spaces are left to
    the platform checks. The planner starts the run's constraints from these.
    """
    rules = platform_rules(platform)
    if rules is None or rules.counting != "graphemes":
        return {}
    limits = {"title_max": rules.title_max, "body_min": rules.body_min, "body_max": rules.body_max}
    return {key: value for key, value in limits.items() if value is not None}


def _known_platform(value: str) -> str:
    if value not in PLATFORMS:
        raise ValueError(f"unknown platform {value!r}; known: {', '.join(PLATFORM_IDS)}")
    return value


#: A platform id as clients send it: one of `PLATFORM_IDS` (422 names the field otherwise).
PlatformId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=40, pattern=r"^[a-z0-9_-]+$"),
    AfterValidator(_known_platform),
    Field(json_schema_extra={"enum": list(PLATFORM_IDS)}),
]


def _range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return str(low) if low == high else f"{low}–{high}"
    return f"至少 {low}" if low is not None else f"最多 {high}"


def writer_rules(platform: str | None) -> str:
    """Return the writer's prompt lines on a platform's rules ("" for an unknown platform)."""
    rules = platform_rules(platform)
    if rules is None:
        return ""
    lines = []
    if rules.form:
        lines.append(prompt.FORM.format(form=rules.form))
    if rules.format:
        lines.append(prompt.FORMAT.format(format=rules.format))
    if rules.title == "none":
        lines.append(prompt.TITLE_NONE)
    elif rules.title == "required":
        lines.append(prompt.TITLE_REQUIRED)
    if rules.title_max is not None:
        lines.append(prompt.TITLE_MAX.format(n=rules.title_max))
    if rules.body_min is not None or rules.body_max is not None:
        lines.append(prompt.BODY_RANGE.format(range=_range(rules.body_min, rules.body_max)))
    if rules.text_max is not None:
        lines.append(prompt.TEXT_MAX.format(n=rules.text_max))
    if rules.tags_min is not None or rules.tags_max is not None:
        lines.append(prompt.TAGS_RANGE.format(range=_range(rules.tags_min, rules.tags_max)))
    if rules.tag_format != "#{tag}":
        lines.append(prompt.TAG_FORMAT.format(example=rules.tag_text("话题")))
    if rules.images_max == 0:
        lines.append(prompt.IMAGES_NONE)
    elif rules.images_min is not None or rules.images_max is not None:
        lines.append(prompt.IMAGES_RANGE.format(range=_range(rules.images_min, rules.images_max)))
    if rules.headings_min:
        lines.append(prompt.HEADINGS_MIN.format(n=rules.headings_min))
    if rules.shots_min:
        lines.append(prompt.SHOTS.format(n=rules.shots_min, onscreen=rules.onscreen_max or "—"))
    if rules.thread_post_max is not None:
        lines.append(prompt.THREAD.format(n=rules.thread_post_max, posts=rules.thread_posts_max))
    lines.append(prompt.COUNTING[rules.counting])
    header = prompt.PLATFORM_HEADER.format(name=rules.name)
    return "\n".join([header, *(f"- {line}" for line in lines)])
