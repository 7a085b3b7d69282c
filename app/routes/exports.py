"""Export a thread's post: GET /threads/{thread_id}/export.zip.

The zip holds `post.md` (title, body and `#tags` of the published post, as the
console copies it) and the post's image cards as `card-<slot>.png` (the stored
bytes, unchanged; the extension follows the stored content type). The thread must
be the caller's (404 otherwise, like every thread route) and must have a result
with a post (409 otherwise: there is nothing to export yet).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from starlette.concurrency import run_in_threadpool

from app.access import READ
from app.deps import AssetsDep, PrincipalDep, ThreadsDep
from app.errors import Conflict
from app.schemas import ID_PATTERN
from providers.assets import AssetStore, is_valid_asset_id

router = APIRouter(tags=["threads"])

ThreadId = Annotated[str, Path(pattern=ID_PATTERN, description="Thread id.")]
_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp"}


def post_markdown(post: Mapping[str, Any]) -> str:
    """Render a result's post (`{title, blocks, tags}`) as Markdown."""
    lines = [f"# {post.get('title') or ''}".rstrip(), ""]
    for block in post.get("blocks") or []:
        text = str(block.get("text") or "")
        kind = block.get("type")
        lines.append(
            f"## {text}" if kind == "heading" else f"- {text}" if kind == "list_item" else text
        )
        lines.append("")
    tags = [f"#{tag}" for tag in post.get("tags") or []]
    if tags:
        lines.append(" ".join(tags))
    return "\n".join(lines).rstrip() + "\n"


def _zip(result: Mapping[str, Any], assets: AssetStore) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("post.md", post_markdown(result.get("post") or {}))
        for index, image in enumerate(result.get("images") or [], start=1):
            asset_id = str(image.get("asset_id") or "")
            record = assets.get(asset_id) if is_valid_asset_id(asset_id) else None
            if record is None or record.path is None:
                continue  # an asset deleted from disk: the post still exports
            extension = _EXTENSIONS.get(record.content_type, "bin")
            archive.write(record.path, f"card-{image.get('slot') or index}.{extension}")
    return buffer.getvalue()


@router.get(
    "/threads/{thread_id}/export.zip",
    summary="Export the thread's post as Markdown and its image cards",
    response_class=Response,
    responses={200: {"content": {"application/zip": {}}}},
    dependencies=[READ],
)
async def export_thread(
    thread_id: ThreadId, threads: ThreadsDep, assets: AssetsDep, owner: PrincipalDep
) -> Response:
    """Answer a zip of `post.md` and the post's cards (see the module docstring)."""
    thread = await threads.get(owner, thread_id)
    result = (thread.values or {}).get("result") or {}
    post = result.get("post") or {}
    if not (post.get("title") or post.get("blocks")):
        raise Conflict(f"thread {thread_id!r} has no post to export yet")
    data = await run_in_threadpool(_zip, result, assets)
    return Response(
        data,
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="atelier-{thread_id[:8]}.zip"'},
    )
