"""The assistants service: the built-in assistants, and those a caller creates and versions.

The built-in assistants (one per graph the engine was opened with) are read-only. A
caller creates more (`AssistantRecord`: a saved config and context of a graph, its
context checked against the graph's context type), each update a new version, one
version the latest, the one runs use. See docs/architecture.md.
"""

from __future__ import annotations

import uuid
from typing import Any

from engine.assistants import Assistant, AssistantRecord, IfExists
from engine.errors import Conflict, InvalidFields, NotFound
from engine.preparation import check_context
from engine.records import now
from engine.repositories import AssistantExists
from engine.services.core import EngineCore


class AssistantsService:
    """Assistants: the built-in ones, and each owner's created ones with their versions."""

    def __init__(self, core: EngineCore) -> None:
        """Serve assistants from the engine's shared parts."""
        self._core = core
        self._created = core.created

    # -- built-in ----------------------------------------------------------------------

    def builtin(self, assistant_id: str) -> Assistant:
        """Return a built-in assistant, or raise NotFound naming the known ones."""
        try:
            return self._core.builtins[assistant_id]
        except KeyError:
            known = ", ".join(sorted(self._core.builtins)) or "none"
            raise NotFound(
                f"assistant {assistant_id!r} not found; this server has: {known}",
                field="assistant_id",
            ) from None

    def builtins(self) -> list[Assistant]:
        """Return the built-in assistants this server runs (one per graph), sorted by id."""
        return sorted(self._core.builtins.values(), key=lambda a: a.assistant_id)

    async def resolve(self, owner: str, assistant_id: str) -> Assistant:
        """Return a built-in assistant, or the owner's created one at its latest version.

        Raises:
            NotFound: Neither (also when another owner created it).
        """
        return await self._core.resolve(owner, assistant_id)

    # -- created -----------------------------------------------------------------------

    def _check(
        self, graph_id: str, config: dict[str, Any], context: dict[str, Any]
    ) -> dict[str, Any]:
        """Check an assistant's graph and context against the graph's context type.

        Returns:
            The context as the context type validated it.

        Raises:
            InvalidFields: The graph is unknown (`graph_id`), or the context (or the
                context fields of `config.configurable`) breaks the context type's
                rules, naming `context.<field>`.
        """
        builtin = self._core.builtins.get(graph_id)
        if builtin is None:
            known = ", ".join(sorted(self._core.builtins))
            raise InvalidFields.at("graph_id", f"unknown graph {graph_id!r}; graphs: {known}")
        if builtin.spec.context_type is None:
            return context
        return check_context(builtin.spec, context, config)

    async def create(
        self,
        owner: str,
        *,
        graph_id: str,
        assistant_id: str | None = None,
        config: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        name: str | None = None,
        description: str | None = None,
        if_exists: IfExists = "raise",
    ) -> Assistant:
        """Create an assistant of a graph (version 1, the latest), owned by `owner`.

        Raises:
            RunsError: Conflict (the id is a built-in one's, or taken: `if_exists`
                `do_nothing` returns the owner's own), InvalidFields (graph, context),
                QuotaExceeded (the owner's `assistants`).
        """
        assistant_id = assistant_id or str(uuid.uuid4())
        if assistant_id in self._core.builtins:
            raise Conflict(
                f"assistant {assistant_id!r} is a built-in assistant; choose another id",
                field="assistant_id",
            )
        config, context = dict(config or {}), dict(context or {})
        context = self._check(graph_id, config, context)
        if if_exists == "do_nothing":
            existing = await self._created.get(owner, assistant_id)
            if existing is not None:
                return self._core.served(existing)
        stamp = now()
        record = AssistantRecord(
            assistant_id=assistant_id,
            owner=owner,
            graph_id=graph_id,
            version=1,
            name=name or "Untitled",
            description=description,
            config=config,
            context=context,
            metadata=metadata or {},
            created_at=stamp,
            updated_at=stamp,
        )
        limits = await self._core.limits(owner)
        try:
            await self._created.insert(record, limit=limits.assistants)
        except AssistantExists:
            raise Conflict(f"assistant {assistant_id!r} already exists") from None
        return self._core.served(record)

    async def _owned(self, owner: str, assistant_id: str, verb: str) -> AssistantRecord:
        """Return the owner's created assistant to change; refuse a built-in one.

        Raises:
            RunsError: Conflict (a built-in assistant is read-only) or NotFound.
        """
        if assistant_id in self._core.builtins:
            raise Conflict(
                f"assistant {assistant_id!r} is built in and read-only: it cannot be {verb}; "
                "create an assistant of its graph instead (POST /assistants)",
                field="assistant_id",
            )
        record = await self._created.get(owner, assistant_id)
        if record is None:
            raise NotFound(f"assistant {assistant_id!r} not found", field="assistant_id")
        return record

    async def update(self, owner: str, assistant_id: str, changes: dict[str, Any]) -> Assistant:
        """Write a new version of the owner's assistant, which becomes the latest.

        Args:
            owner: The caller.
            assistant_id: The assistant.
            changes: New `graph_id`, `config`, `context`, `name`, `description`
                (each replaces the latest version's), and `metadata` (merged into it).

        Raises:
            RunsError: Conflict (built-in), NotFound, InvalidFields (graph, context).
        """
        latest = await self._owned(owner, assistant_id, "updated")
        changes = {k: v for k, v in changes.items() if v is not None or k == "description"}
        if "metadata" in changes:
            changes["metadata"] = {**latest.metadata, **changes["metadata"]}
        graph_id = changes.get("graph_id", latest.graph_id)
        config = changes.get("config", latest.config)
        context = self._check(graph_id, config, changes.get("context", latest.context))
        if "context" in changes or "graph_id" in changes:
            changes["context"] = context
        record = await self._created.update(owner, assistant_id, changes, now())
        if record is None:
            raise NotFound(f"assistant {assistant_id!r} not found", field="assistant_id")
        return self._core.served(record)

    async def delete(self, owner: str, assistant_id: str) -> None:
        """Delete the owner's assistant with its versions (its runs' threads stay)."""
        await self._owned(owner, assistant_id, "deleted")
        if not await self._created.delete(owner, assistant_id):
            raise NotFound(f"assistant {assistant_id!r} not found", field="assistant_id")

    async def versions(
        self,
        owner: str,
        assistant_id: str,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Return an assistant's versions, newest first (a built-in one has one)."""
        builtin = self._core.builtins.get(assistant_id)
        if builtin is not None:
            shown = builtin.to_json()
            matches = all(shown["metadata"].get(k) == v for k, v in (metadata or {}).items())
            return [shown][offset : offset + limit] if matches else []
        await self.resolve(owner, assistant_id)
        found = await self._created.versions(
            owner, assistant_id, metadata=metadata, limit=limit, offset=offset
        )
        return [record.to_json() for record in found]

    async def set_latest(self, owner: str, assistant_id: str, version: int) -> Assistant:
        """Make one of the owner's assistant's versions the latest, the one runs use.

        Raises:
            RunsError: Conflict (built-in) or NotFound (assistant, version).
        """
        await self._owned(owner, assistant_id, "changed")
        record = await self._created.set_latest(owner, assistant_id, version)
        if record is None:
            raise NotFound(f"assistant {assistant_id!r} has no version {version}", field="version")
        return self._core.served(record)

    def _builtins_matching(
        self, graph_id: str | None, name: str | None, metadata: dict[str, Any] | None
    ) -> list[Assistant]:
        return [
            a
            for a in self._core.builtins.values()
            if (graph_id is None or a.graph_id == graph_id)
            and (name is None or a.spec.name == name)
            and not metadata  # built-in assistants carry no metadata: any filter excludes them
        ]

    async def search(
        self,
        owner: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        sort_by: str | None = None,
        sort_order: str | None = None,
    ) -> list[dict[str, Any]]:
        """Return the assistants matching every filter: the built-in ones, then the owner's.

        Without `sort_by` the built-in ones come first (as the server lists them), then
        the owner's newest first; with it, all of them in that order.
        """
        order = sort_order or ("asc" if sort_by is not None else "desc")
        builtins = [a.to_json() for a in self._builtins_matching(graph_id, name, metadata)]
        created = await self._created.search(
            owner,
            graph_id=graph_id,
            name=name,
            metadata=metadata,
            limit=offset + limit,  # the page may start among the built-in ones
            offset=0,
            sort_by=sort_by or "created_at",
            sort_order=order,
        )
        found = builtins + [record.to_json() for record in created]
        if sort_by is not None:
            key = sort_by
            found.sort(key=lambda a: str(a[key] or ""), reverse=order == "desc")
        return found[offset : offset + limit]

    async def count(
        self,
        owner: str,
        *,
        graph_id: str | None = None,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Return how many assistants match every filter (the built-in ones and the owner's)."""
        created = await self._created.count(owner, graph_id=graph_id, name=name, metadata=metadata)
        return len(self._builtins_matching(graph_id, name, metadata)) + created

    async def created(
        self, owner: str, *, limit: int, offset: int = 0
    ) -> tuple[list[Assistant], bool]:
        """Return a page of the owner's created assistants, oldest first, each ready to run.

        Oldest first, so that paging on by `offset` while the owner creates more
        neither skips nor repeats one. An assistant whose graph this server no longer
        serves is left out of its page.

        Returns:
            The page's assistants at their latest versions, and whether more follow.
        """
        records = await self._created.search(
            owner, limit=limit + 1, offset=offset, sort_by="created_at", sort_order="asc"
        )
        builtins = self._core.builtins
        served = [self._core.served(r) for r in records[:limit] if r.graph_id in builtins]
        return served, len(records) > limit
