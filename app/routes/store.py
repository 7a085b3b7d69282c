"""The Store over HTTP, in the LangGraph Platform's shape (the SDKs' `client.store`).

    PUT    /store/items           put an item (namespace, key, value; optional index, ttl)
    GET    /store/items           one item (namespace joined by ".", key), or null
    DELETE /store/items           delete an item (namespace, key)
    POST   /store/items/search    items under a prefix: filter, query, limit, offset
    POST   /store/namespaces      namespaces: prefix, suffix, max_depth, limit, offset

Each API key has a store of its own: the key's owner id is a hidden first label of
every namespace (`engine.ScopedStore`), so no namespace a client writes
reaches another key's items. Runs read the same store as `runtime.store`, scoped to
the key that started them.

Namespaces are lists of 1 to `MAX_DEPTH` labels, each 1 to `MAX_LABEL_CHARS`
characters without "." (the GET joins them with dots, as LangGraph does) or NUL.
A search's `query` ranks by meaning when EMBEDDINGS_BASE_URL is set, else by
Chinese keywords (items matching nothing are left out); `index` is accepted as
the SDKs send it and ignored: a query reads the text of the whole value. `ttl`
is in minutes; reading an item renews it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args

import orjson
from fastapi import APIRouter, Depends, HTTPException, Query, Response, status
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
)

from app.access import READ, WRITE
from app.deps import PrincipalDep, StoreDep
from app.schemas import QueryBool
from engine import EmbeddingsUnavailable, ScopedStore

router = APIRouter(prefix="/store", tags=["store"])

MAX_DEPTH = 10
MAX_LABEL_CHARS = 128
MAX_KEY_CHARS = 512
MAX_VALUE_BYTES = 262_144
MAX_FILTER_KEYS = 20
MAX_QUERY_CHARS = 2000
MAX_SEARCH_LIMIT = 1000
MAX_SEARCH_OFFSET = 100_000
MAX_TTL_MINUTES = 5_256_000  # ten years
#: Operators a filter value may use (a value that is an object is a set of operators).
FilterOperator = Literal["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]
FILTER_OPERATORS = get_args(FilterOperator)
#: A GET's namespace: the labels joined by ".".
_JOINED_NAMESPACE = (
    rf"^[^.\x00]{{1,{MAX_LABEL_CHARS}}}(\.[^.\x00]{{1,{MAX_LABEL_CHARS}}}){{0,{MAX_DEPTH - 1}}}$"
)

Label = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_LABEL_CHARS, pattern=r"^[^.\x00]+$"),
]
Namespace = Annotated[list[Label], Field(min_length=1, max_length=MAX_DEPTH)]
NamespacePrefix = Annotated[list[Label], Field(max_length=MAX_DEPTH)]
Key = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_KEY_CHARS, pattern=r"^[^\x00]+$")
]
FilterKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_LABEL_CHARS, pattern=r"^[A-Za-z0-9_-]+$")
]
FilterScalar = Annotated[
    StrictBool
    | Annotated[StrictInt, Field(ge=-(2**53), le=2**53)]
    | Annotated[float, Field(allow_inf_nan=False)]
    | Annotated[str, StringConstraints(max_length=MAX_LABEL_CHARS * 8, pattern=r"^[^\x00]*$")],
    Field(description="A value to compare with."),
]
FilterValue = FilterScalar | None | dict[FilterOperator, FilterScalar]


def _false_only(value: Any) -> Any:
    """Take `false` as it is: not 0, nor anything else equal to it."""
    if value is not False:
        raise ValueError("must be false or a list of fields")
    return value


#: What the SDKs send as `index`: false, or the fields to index.
IndexFields = (
    Annotated[Literal[False], BeforeValidator(_false_only)]
    | Annotated[list[Annotated[str, StringConstraints(max_length=200)]], Field(max_length=20)]
)

_LABEL_DOC = (
    f"Labels, 1-{MAX_LABEL_CHARS} characters each, without '.' or NUL; at most {MAX_DEPTH}."
)


def _storable(value: dict[str, Any]) -> dict[str, Any]:
    """Refuse a value the stores cannot keep alike: too large, NUL text, too wide integers."""
    try:
        data = orjson.dumps(value)
    except TypeError:
        raise ValueError(
            "value must be storable JSON: valid Unicode, integers within 64 bits, "
            "at most 254 levels deep"
        ) from None
    if len(data) > MAX_VALUE_BYTES:
        raise ValueError(f"value must be at most {MAX_VALUE_BYTES} bytes as JSON")
    if b"\\u0000" in data:
        raise ValueError("value must not contain NUL characters")
    return value


class StorePut(BaseModel):
    """An item to store (a new one, or a new value for the key)."""

    model_config = ConfigDict(extra="forbid")

    namespace: Namespace = Field(description=_LABEL_DOC, examples=[["brand-a", "voice"]])
    key: Key = Field(description="The item's key in its namespace.", examples=["tone"])
    value: Annotated[dict[str, Any], AfterValidator(_storable)] = Field(
        description=f"The item: a JSON object of at most {MAX_VALUE_BYTES} bytes.",
        examples=[{"text": "像学姐一样亲切，讲成分不讲玄学"}],
    )
    index: IndexFields | None = Field(
        default=None,
        description="Fields to index, as the SDKs send it; accepted and ignored (a "
        "query reads the text of the whole value).",
    )
    ttl: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TTL_MINUTES,
        description="Minutes until the item expires (reading it renews them); none: never.",
        examples=[1440],
    )


class StoreDelete(BaseModel):
    """The item to delete."""

    model_config = ConfigDict(extra="forbid")

    namespace: Namespace = Field(description=_LABEL_DOC, examples=[["brand-a", "voice"]])
    key: Key = Field(description="The item's key.", examples=["tone"])


class StoreSearch(BaseModel):
    """A search of the items under a namespace prefix."""

    model_config = ConfigDict(extra="forbid")

    namespace_prefix: NamespacePrefix = Field(
        default_factory=list,
        description="Only items whose namespace starts with these labels (none: all). "
        + _LABEL_DOC,
        examples=[["brand-a"]],
    )
    filter: dict[FilterKey, FilterValue] | None = Field(
        default=None,
        max_length=MAX_FILTER_KEYS,
        description="Only items whose value's top-level fields match: a field name "
        "(letters, digits, '_', '-') to a value, or to operators "
        f"({', '.join(FILTER_OPERATORS)}) and their values.",
        examples=[{"kind": "voice"}],
    )
    limit: StrictInt = Field(
        default=10, ge=1, le=MAX_SEARCH_LIMIT, description="Most items.", examples=[10]
    )
    offset: StrictInt = Field(
        default=0, ge=0, le=MAX_SEARCH_OFFSET, description="Items to skip.", examples=[0]
    )
    query: (
        Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS, pattern=r"\S")]
        | None
    ) = Field(
        default=None,
        description="Rank by relevance to this text: by meaning with EMBEDDINGS_BASE_URL, "
        "else by Chinese keywords (items matching nothing are left out).",
        examples=["亲切 成分"],
    )
    refresh_ttl: StrictBool | None = Field(
        default=None, description="Renew the TTL of the items returned (default: yes)."
    )


class StoreNamespaces(BaseModel):
    """Which namespaces to list."""

    model_config = ConfigDict(extra="forbid")

    prefix: NamespacePrefix | None = Field(
        default=None,
        description="Namespaces starting with these labels ('*' matches any).",
        examples=[["brand-a"]],
    )
    suffix: NamespacePrefix | None = Field(
        default=None,
        description="Namespaces ending with these labels ('*' matches any).",
        examples=[["voice"]],
    )
    max_depth: StrictInt | None = Field(
        default=None,
        ge=1,
        le=MAX_DEPTH,
        description="Cut longer namespaces to this many labels.",
        examples=[2],
    )
    limit: StrictInt = Field(
        default=100, ge=1, le=MAX_SEARCH_LIMIT, description="Most namespaces.", examples=[100]
    )
    offset: StrictInt = Field(
        default=0, ge=0, le=MAX_SEARCH_OFFSET, description="Namespaces to skip.", examples=[0]
    )


class StoreItem(BaseModel):
    """An item of the store."""

    namespace: list[str] = Field(description="Its namespace.", examples=[["brand-a", "voice"]])
    key: str = Field(description="Its key.", examples=["tone"])
    value: dict[str, Any] = Field(description="The item.")
    created_at: datetime = Field(description="When it was first put.")
    updated_at: datetime = Field(description="When it was last put.")


class StoreSearchItem(StoreItem):
    """An item found by a search."""

    score: float | None = Field(
        default=None, description="Relevance to the query (none without a query)."
    )


class StoreSearchResponse(BaseModel):
    """The items found, best first with a query, else most recently updated first."""

    items: list[StoreSearchItem]


class StoreNamespacesResponse(BaseModel):
    """The namespaces found."""

    namespaces: list[list[str]]


def _caller_store(store: StoreDep, owner: PrincipalDep) -> ScopedStore:
    """Return the store of the caller's API key."""
    return store.for_owner(owner)


CallerStore = Annotated[ScopedStore, Depends(_caller_store)]


def _item(item: Any) -> dict[str, Any]:
    """Return an item's fields; SQLite's naive timestamps are UTC, said so as PostgreSQL's are."""
    return {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": _utc(item.created_at),
        "updated_at": _utc(item.updated_at),
    }


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@router.put(
    "/items", status_code=status.HTTP_204_NO_CONTENT, summary="Put an item", dependencies=[WRITE]
)
async def put_item(body: StorePut, store: CallerStore) -> Response:
    """Store the value under (namespace, key), replacing what was there."""
    await store.aput(
        tuple(body.namespace),
        body.key,
        body.value,
        ttl=body.ttl,
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/items", response_model=StoreItem | None, summary="Get an item", dependencies=[READ])
async def get_item(
    store: CallerStore,
    namespace: Annotated[
        str,
        Query(
            max_length=(MAX_LABEL_CHARS + 1) * MAX_DEPTH,
            pattern=_JOINED_NAMESPACE,
            description=f"The namespace's labels joined by '.' (1-{MAX_DEPTH} labels, each "
            f"1-{MAX_LABEL_CHARS} characters).",
            examples=["brand-a.voice"],
        ),
    ],
    key: Annotated[
        str,
        Query(
            min_length=1,
            max_length=MAX_KEY_CHARS,
            pattern=r"^[^\x00]+$",
            description="The item's key.",
            examples=["tone"],
        ),
    ],
    refresh_ttl: Annotated[
        QueryBool | None, Query(description="Renew the item's TTL (default: yes).")
    ] = None,
) -> dict[str, Any] | None:
    """Return the item, or null when there is none."""
    labels = tuple(namespace.split("."))
    item = await store.aget(labels, key, refresh_ttl=refresh_ttl)
    return _item(item) if item is not None else None


@router.delete(
    "/items", status_code=status.HTTP_204_NO_CONTENT, summary="Delete an item", dependencies=[WRITE]
)
async def delete_item(body: StoreDelete, store: CallerStore) -> Response:
    """Delete the item (nothing happens when there is none)."""
    await store.adelete(tuple(body.namespace), body.key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/items/search",
    response_model=StoreSearchResponse,
    summary="Search items",
    responses={503: {"description": "The embeddings endpoint did not answer; retry later."}},
    dependencies=[READ],
)
async def search_items(body: StoreSearch, store: CallerStore) -> StoreSearchResponse:
    """Return the items under the prefix that match the filter, ranked for the query if any."""
    try:
        found = await store.asearch(
            tuple(body.namespace_prefix),
            query=body.query,
            filter=body.filter,
            limit=body.limit,
            offset=body.offset,
            refresh_ttl=body.refresh_ttl,
        )
    except EmbeddingsUnavailable:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            "The embeddings endpoint (EMBEDDINGS_BASE_URL) did not answer; retry later.",
        ) from None
    return StoreSearchResponse(
        items=[StoreSearchItem(**_item(item), score=item.score) for item in found]
    )


@router.post(
    "/namespaces",
    response_model=StoreNamespacesResponse,
    summary="List namespaces",
    dependencies=[READ],
)
async def list_namespaces(body: StoreNamespaces, store: CallerStore) -> StoreNamespacesResponse:
    """Return the namespaces that have items, matching the prefix and suffix, sorted."""
    found = await store.alist_namespaces(
        prefix=tuple(body.prefix) if body.prefix else None,
        suffix=tuple(body.suffix) if body.suffix else None,
        max_depth=body.max_depth,
        limit=body.limit,
        offset=body.offset,
    )
    return StoreNamespacesResponse(namespaces=[list(ns) for ns in found])
