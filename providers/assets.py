"""Content-addressed storage for generated and uploaded images.

Every asset is stored under its content hash: the asset id is the first 32
hex characters (128 bits) of the SHA-256 of its bytes. The same bytes always
get the same id, so storing a card twice is a no-op and ids are safe to put
in URLs (`/assets/{asset_id}`). Layout under `root`:

    <asset_id>.<ext>   the image bytes (png, jpg, webp or gif)
    <asset_id>.json    metadata sidecar (`AssetRecord` without `path`/`url`)

Writes go to a temporary file in the same directory and are moved into place
with `os.replace`, so a reader never sees half an image, and the data file is
written before its sidecar, so a sidecar always points at complete bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import re
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Literal

from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, Field, computed_field

ASSET_ID_LENGTH = 32
"""Hex characters of the SHA-256 digest kept as the asset id (128 bits)."""

# Strict: lower-case hex of the exact length, so an id can never name a path
# outside the store ("../etc/passwd", "a/b", absolute paths, NUL bytes).
_ASSET_ID_RE = re.compile(rf"^[0-9a-f]{{{ASSET_ID_LENGTH}}}$")

# Pillow format name → (content type, file extension). Only these are stored.
_FORMATS: dict[str, tuple[str, str]] = {
    "PNG": ("image/png", "png"),
    "JPEG": ("image/jpeg", "jpg"),
    "WEBP": ("image/webp", "webp"),
    "GIF": ("image/gif", "gif"),
}
_EXTENSIONS: tuple[str, ...] = tuple(ext for _, ext in _FORMATS.values())

AssetKind = Literal["generated", "uploaded"]


class AssetRecord(BaseModel):
    """Metadata of one stored image, as served to clients and kept in the sidecar."""

    asset_id: str = Field(
        description="Content hash id: first 32 hex chars of the SHA-256 of the bytes.",
        pattern=_ASSET_ID_RE.pattern,
        examples=["3f5a0c9e1b7d4e2a8c6f0b1d2e3f4a5b"],
    )
    content_type: str = Field(
        description="MIME type detected from the bytes.", examples=["image/png"]
    )
    width: int = Field(ge=1, description="Width in pixels.", examples=[1080])
    height: int = Field(ge=1, description="Height in pixels.", examples=[1440])
    bytes: int = Field(ge=1, description="Size of the file in bytes.", examples=[284113])
    kind: AssetKind = Field(
        description="Whether Atelier generated the image or a user uploaded it.",
        examples=["generated"],
    )
    slot: int | None = Field(
        default=None, ge=1, description="Post image slot the image fills.", examples=[1]
    )
    prompt: str | None = Field(
        default=None, description="Prompt or description the image was made from."
    )
    created_at: datetime = Field(description="When the asset was first stored (UTC).")
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Free-form metadata (provider, run id, …)."
    )
    path: Path | None = Field(
        default=None, exclude=True, description="Local file path; never serialized."
    )

    @computed_field(description="URL the API serves the image at.")  # type: ignore[prop-decorator]
    @property
    def url(self) -> str:
        """Return the API path of the image."""
        return f"/assets/{self.asset_id}"


def is_valid_asset_id(asset_id: str) -> bool:
    """Return whether `asset_id` has the exact shape of an asset id (32 lower-case hex)."""
    return isinstance(asset_id, str) and _ASSET_ID_RE.fullmatch(asset_id) is not None


def asset_id_for(data: bytes) -> str:
    """Return the asset id the store gives `data`."""
    return hashlib.sha256(data).hexdigest()[:ASSET_ID_LENGTH]


def new_record(
    data: bytes, kind: AssetKind = "generated", meta: Mapping[str, Any] | None = None
) -> AssetRecord:
    """Return the record a store gives new image bytes (read from their header), unsaved.

    Raises:
        ValueError: The bytes are empty or not an image of a stored format.
    """
    if not data:
        raise ValueError("cannot store an empty asset")
    fmt, width, height = _probe(data)
    extra = dict(meta or {})
    slot = extra.pop("slot", None)
    prompt = extra.pop("prompt", None)
    return AssetRecord(
        asset_id=asset_id_for(data),
        content_type=_FORMATS[fmt][0],
        width=width,
        height=height,
        bytes=len(data),
        kind=kind,
        slot=slot,
        prompt=prompt,
        created_at=datetime.now(UTC),
        extra=extra,
    )


def extension_for(content_type: str) -> str:
    """Return the file extension an asset of a stored content type is written with."""
    for mime, ext in _FORMATS.values():
        if mime == content_type:
            return ext
    raise ValueError(f"not a stored content type: {content_type!r}")


class AssetStore:
    """Store images by content hash under one directory.

    Lookups with a malformed id raise `ValueError` rather than returning None:
    such an id is a bug or an attack, not a missing asset. Callers serving
    HTTP map both to 404.
    """

    def __init__(self, root: Path) -> None:
        """Bind the store to `root`; the directory is created on the first `put`."""
        self.root = Path(root)

    def put(
        self,
        data: bytes,
        content_type: str | None = None,
        *,
        kind: AssetKind = "generated",
        meta: Mapping[str, Any] | None = None,
    ) -> AssetRecord:
        """Store image bytes and return their record; storing the same bytes again is a no-op.

        The image header is read to learn its real format and size; the stored
        content type is the detected one, so a mislabelled upload is served
        with the right type. When the bytes are already stored, the existing
        record (first metadata wins) is returned unchanged.

        Args:
            data: The encoded image (PNG, JPEG, WebP or GIF).
            content_type: The declared MIME type, a hint only (see above).
            kind: "generated" for provider output, "uploaded" for user files.
            meta: Optional metadata: `slot` and `prompt` go to their fields,
                every other (JSON-serializable) key goes to `extra`.

        Returns:
            The asset's record, with `path` set.

        Raises:
            ValueError: The bytes are empty or not an image of a stored format.
        """
        del content_type  # Detected from the bytes below; kept for callers' clarity.
        record = new_record(data, kind, meta)  # validates before anything is looked up
        existing = self.get(record.asset_id)
        if existing is not None:
            return existing
        return self._write_files(record, data)

    def _write_files(self, record: AssetRecord, data: bytes) -> AssetRecord:
        """Write an asset's bytes, then its sidecar, under `root`; return it with `path`."""
        self.root.mkdir(parents=True, exist_ok=True)
        data_path = self.root / f"{record.asset_id}.{extension_for(record.content_type)}"
        sidecar = record.model_dump_json(exclude={"url"}, indent=2).encode("utf-8")
        _atomic_write(data_path, data)
        _atomic_write(self.root / f"{record.asset_id}.json", sidecar)
        return record.model_copy(update={"path": data_path})

    async def aput(
        self,
        data: bytes,
        content_type: str | None = None,
        *,
        kind: AssetKind = "generated",
        meta: Mapping[str, Any] | None = None,
    ) -> AssetRecord:
        """Store image bytes like `put`, in a worker thread so the event loop keeps running."""
        return await asyncio.to_thread(self.put, data, content_type, kind=kind, meta=meta)

    def get(self, asset_id: str) -> AssetRecord | None:
        """Return the record of an asset, or None when it is not stored.

        Raises:
            ValueError: `asset_id` is not a well-formed asset id.
        """
        _check_id(asset_id)
        data_path = self.path(asset_id)
        if data_path is None:
            return None
        try:
            raw = (self.root / f"{asset_id}.json").read_bytes()
        except FileNotFoundError:
            return None
        record = AssetRecord.model_validate(json.loads(raw))
        return record.model_copy(update={"path": data_path})

    def path(self, asset_id: str) -> Path | None:
        """Return the file path of an asset's bytes, or None when it is not stored.

        Raises:
            ValueError: `asset_id` is not a well-formed asset id.
        """
        _check_id(asset_id)
        for ext in _EXTENSIONS:
            candidate = self.root / f"{asset_id}.{ext}"
            if candidate.is_file():
                return candidate
        return None

    def open(self, asset_id: str) -> BinaryIO:
        """Open an asset's bytes for reading; the caller closes the file.

        Raises:
            ValueError: `asset_id` is not a well-formed asset id.
            FileNotFoundError: The asset is not stored.
        """
        data_path = self.path(asset_id)
        if data_path is None:
            raise FileNotFoundError(f"asset {asset_id} is not stored")
        return data_path.open("rb")

    def read_bytes(self, asset_id: str) -> bytes | None:
        """Return an asset's bytes, or None when it is not stored.

        Raises:
            ValueError: `asset_id` is not a well-formed asset id.
        """
        data_path = self.path(asset_id)
        return data_path.read_bytes() if data_path is not None else None


def _check_id(asset_id: str) -> None:
    if not is_valid_asset_id(asset_id):
        raise ValueError(f"invalid asset id {asset_id!r}: expected {ASSET_ID_LENGTH} hex chars")


def _probe(data: bytes) -> tuple[str, int, int]:
    """Return (Pillow format, width, height) from the image header, without decoding pixels."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt, (width, height) = img.format, img.size
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise ValueError("asset bytes are not a readable image") from exc
    if fmt not in _FORMATS:
        allowed = ", ".join(sorted(_FORMATS))
        raise ValueError(f"unsupported image format {fmt!r}; allowed: {allowed}")
    return fmt, width, height


def _atomic_write(target: Path, data: bytes) -> None:
    """Write `data` to `target` through a temp file in the same directory and `os.replace`."""
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
