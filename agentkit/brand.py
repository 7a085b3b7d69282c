"""A brand preset: what an `atelier` assistant carries so that its runs sound like one brand.

`BrandPreset` is the one declaration of a preset's fields, their types and bounds.
It is the context schema an `atelier` assistant publishes (`GET /assistants/{id}/schemas`)
and validates its `context` with, and the shape of the pipeline input's `brand` key
(`agentkit.state.PipelineInput`), where the preset a run was started with is recorded.

Some fields have a home in the run's input already (`audience`, `platform`,
`image_provider`, `image_count`; the terms and lengths are `constraints`;
`example_posts` are `reference_texts`): the run's own input overrides those field by
field. The rest is the brand's alone and the agents read it from `state["brand"]`:
`brand_name` and `voice` (the writer's and the critic's instructions),
`critic_pass_threshold` (instead of the server's `CRITIC_PASS_THRESHOLD`) and
`knowledge_namespace` (the vault notes the run may retrieve).

Where the merge happens: in the graph, when a run starts (`agentkit.run_start`, with
`brand_fill`), so a notebook's `build_pipeline().ainvoke({"request": ..., "brand":
{...}})` gets the same post as a run of an assistant carrying that preset. The server
only resolves the assistant and puts its preset in the input's `brand`
(`engine.preparation`); a `brand` the run's input sends itself overrides the
preset's fields one by one (`preset_with`).

A preset is what an `atelier` assistant carries in its `context`; its brand fields
are also accepted in `config.configurable` (`preset_of`; the context wins), so a
client that only knows `config` can save one too. No field names a URL: model
endpoints and keys stay the server's settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints, TypeAdapter
from typing_extensions import TypedDict

from agentkit.platforms import PlatformId
from core.settings import ImageProviderName

#: One term a post must use or must never use.
Term = Annotated[str, StringConstraints(min_length=1, max_length=50)]
Terms = Annotated[list[Term], Field(max_length=50)]
#: A namespace of vault notes: lower-case words joined by `-`, `_` or `.`.
NamespaceName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$")
]
TitleLength = Annotated[int, Field(ge=0, le=1000)]
BodyLength = Annotated[int, Field(ge=0, le=100_000)]


class BrandPreset(TypedDict, total=False):
    """A brand's voice, audience, terms, lengths, examples and notes (every field optional)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    brand_name: Annotated[
        str,
        StringConstraints(min_length=1, max_length=80),
        Field(description="The brand's name, as posts may mention it.", examples=["青禾护肤"]),
    ]
    voice: Annotated[
        str,
        StringConstraints(min_length=1, max_length=2000),
        Field(
            description="Voice and tone, in free text.",
            examples=["像学姐一样亲切，讲成分不讲玄学，少用感叹号"],
        ),
    ]
    audience: Annotated[
        str,
        StringConstraints(max_length=200),
        Field(description="Who the brand writes for.", examples=["大学生"]),
    ]
    platform: Annotated[
        PlatformId,
        Field(description="The platform the brand posts on.", examples=["xiaohongshu"]),
    ]
    image_provider: Annotated[ImageProviderName, Field(description="Image provider.")]
    image_count: Annotated[int, Field(ge=1, le=9, description="Images per post (1–9).")]
    must_include: Annotated[Terms, Field(description="Terms every post must use.")]
    must_avoid: Annotated[Terms, Field(description="Terms no post may use.")]
    title_min: Annotated[TitleLength, Field(description="Min title characters.")]
    title_max: Annotated[TitleLength, Field(description="Max title characters.")]
    body_min: Annotated[BodyLength, Field(description="Min body characters.")]
    body_max: Annotated[BodyLength, Field(description="Max body characters.")]
    example_posts: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=4000)]],
        Field(max_length=5, description="Posts in the brand's voice, to imitate."),
    ]
    critic_pass_threshold: Annotated[
        float, Field(ge=0, le=1, description="Judge score a post needs to pass (0–1).")
    ]
    knowledge_namespace: Annotated[
        NamespaceName,
        Field(description="The vault namespace whose notes the brand's runs read."),
    ]


#: Validates a preset: its fields, their bounds, and no field besides them.
PRESET: TypeAdapter[BrandPreset] = TypeAdapter(BrandPreset)
#: Every field a preset may have.
PRESET_FIELDS: frozenset[str] = frozenset(BrandPreset.__annotations__)
#: Preset fields with a key of the same name in the run's input.
INPUT_FIELDS = ("audience", "platform", "image_provider", "image_count")
#: Preset fields that are verifiable constraints (`agentkit.checks.Constraints`).
CONSTRAINT_FIELDS = ("must_include", "must_avoid", "title_min", "title_max", "body_min", "body_max")


def preset_schema() -> dict[str, Any]:
    """Return the JSON schema of a preset (an `atelier` assistant's context schema)."""
    return PRESET.json_schema()


def preset_of(
    context: Mapping[str, Any] | None, config: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Return an assistant's preset: its `config.configurable` brand fields, then its context.

    Only the preset's fields are taken from `configurable` (it carries other keys
    too); the context is the preset itself, so any key it has is the preset's.
    """
    configurable = (config or {}).get("configurable") or {}
    from_config = (
        {k: v for k, v in configurable.items() if k in PRESET_FIELDS}
        if isinstance(configurable, Mapping)
        else {}
    )
    return {**from_config, **(context or {})}


def preset_with(preset: Mapping[str, Any], brand: Mapping[str, Any] | None) -> dict[str, Any]:
    """Return an assistant's preset with the fields the run's own input `brand` sets instead."""
    own = {k: v for k, v in (brand or {}).items() if v is not None}
    return {**preset, **own}


def brand_fill(values: Mapping[str, Any]) -> dict[str, Any]:
    """Return the input fields the run's brand fills: those its input leaves unset.

    `audience`, `platform`, `image_provider` and `image_count` are taken as they
    are, the terms and lengths into `constraints` key by key, `example_posts` as the
    `reference_texts` when the input has none. A field the input sets (not None)
    stays as the input says. Empty when the run has no brand.
    """
    brand = values.get("brand") or {}
    update: dict[str, Any] = {
        key: brand[key] for key in INPUT_FIELDS if key in brand and values.get(key) is None
    }
    constraints = dict(values.get("constraints") or {})
    filled = {
        key: brand[key]
        for key in CONSTRAINT_FIELDS
        if key in brand and constraints.get(key) is None
    }
    if filled:
        update["constraints"] = {**constraints, **filled}
    if brand.get("example_posts") and not values.get("reference_texts"):
        update["reference_texts"] = list(brand["example_posts"])
    return update
