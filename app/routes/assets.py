"""Images over HTTP: serve stored assets and accept reference-image uploads.

    GET  /assets/{asset_id}   the image bytes, with their detected content type
    POST /assets              upload a reference image: multipart (field `file`) or
                              JSON {"data": "<base64 or data: URL>"}

Ids are content hashes (`providers.assets`), so an asset never changes: responses
carry `ETag: "<asset_id>"` and a one-year `immutable` cache lifetime (`private` when
API keys are on, so a shared cache never hands one key's image to another caller),
and `If-None-Match` gets 304. Anything that is not exactly an asset id is a 404
before the file system is touched (no path traversal).

Uploads are for `reference_images` (PRODUCT.md §2.6). What the client says the file
is (name, `Content-Type`) is not trusted: the bytes are decoded with Pillow and
must be a whole PNG, JPEG or WEBP image (else 415) of at most `MAX_UPLOAD_BYTES`
(else 413) and `MAX_UPLOAD_PIXELS` pixels (else 422, before any pixel is decoded).
The same bytes uploaded twice get the same id (200 the second time, 201 the first).

With `AUTH_API_KEYS` set, `GET /assets/{asset_id}?sig=…` (the signed links posts
carry, `providers.asset_links`) needs no key: `app.security.AuthMiddleware` checks
the signature before this route runs; here `sig` is only documented.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse
from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from app.access import SIGNED, WRITE
from app.deps import AssetsDep, SettingsDep
from providers.assets import ASSET_ID_LENGTH, AssetRecord, asset_id_for, is_valid_asset_id

router = APIRouter(prefix="/assets", tags=["assets"])

#: Pillow format → content type of the images an upload may be.
UPLOAD_FORMATS: dict[str, str] = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}
MAX_UPLOAD_PIXELS = 40_000_000  # 40 MP: a phone photo fits, a decompression bomb does not
MAX_FILENAME_CHARS = 255
CACHE_SECONDS = 365 * 24 * 3600

_DATA_URL = re.compile(r"^data:[\w.+-]+/[\w.+-]+;base64,", re.IGNORECASE)

AssetId = Annotated[
    str,
    Path(
        max_length=128,
        description=f"Asset id: {ASSET_ID_LENGTH} lower-case hex characters (a content hash).",
        examples=["3f5a0c9e1b7d4e2a8c6f0b1d2e3f4a5b"],
    ),
]


Signature = Annotated[
    str | None,
    Query(
        description="The link's signature (in the image links of posts): with it the "
        "image loads without an API key. Checked before the route runs (403 when it is "
        "not this asset's).",
    ),
]


class Base64Upload(BaseModel):
    """A reference image sent as base64 in JSON."""

    model_config = ConfigDict(extra="forbid")

    data: str = Field(
        min_length=1,
        description="The image bytes in base64, or a `data:image/...;base64,` URL. "
        "PNG, JPEG or WEBP; at most MAX_UPLOAD_BYTES once decoded.",
        examples=[
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
        ],
    )
    filename: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_FILENAME_CHARS,
        description="Original file name, kept as metadata only.",
        examples=["moodboard.png"],
    )


class UploadedAsset(BaseModel):
    """A stored reference image; pass `asset_id` in a run's `input.reference_images`."""

    asset_id: str = Field(
        description="Content hash id of the image.", examples=["3f5a0c9e1b7d4e2a8c6f0b1d2e3f4a5b"]
    )
    url: str = Field(
        description="Where the image is served.",
        examples=["/assets/3f5a0c9e1b7d4e2a8c6f0b1d2e3f4a5b"],
    )
    content_type: Literal["image/png", "image/jpeg", "image/webp"] = Field(
        description="Type detected from the bytes.", examples=["image/png"]
    )
    width: int = Field(ge=1, description="Width in pixels.", examples=[1080])
    height: int = Field(ge=1, description="Height in pixels.", examples=[1440])
    bytes: int = Field(ge=1, description="Size in bytes.", examples=[284113])


_UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "The image file (PNG, JPEG or WEBP).",
                        }
                    },
                }
            },
            # Inline: no route takes Base64Upload as its body parameter (the route reads
            # the body itself), so FastAPI never adds it to components.schemas.
            "application/json": {"schema": Base64Upload.model_json_schema()},
        },
    }
}


def _not_found() -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, "Asset not found.")


@router.head("/{asset_id}", include_in_schema=False, dependencies=[SIGNED])
@router.get(
    "/{asset_id}",
    summary="Get an image",
    response_class=FileResponse,
    responses={
        200: {
            "content": {"image/png": {}, "image/jpeg": {}, "image/webp": {}, "image/gif": {}},
            "description": "The image bytes.",
        },
        304: {"description": "The client's copy (If-None-Match) is current."},
        403: {"description": "`sig` is not this asset's signature."},
        404: {"description": "No asset has this id."},
    },
    dependencies=[SIGNED],
)
async def get_asset(
    asset_id: AssetId,
    request: Request,
    assets: AssetsDep,
    settings: SettingsDep,
    sig: Signature = None,  # checked by the auth middleware (app.security)
) -> Response:
    """Serve an image with its content type and immutable cache headers."""
    if not is_valid_asset_id(asset_id):
        raise _not_found()
    record = await run_in_threadpool(assets.get, asset_id)
    if record is None or record.path is None:
        raise _not_found()
    etag = f'"{asset_id}"'
    scope = "private" if settings.auth_api_keys else "public"
    headers = {
        "ETag": etag,
        "Cache-Control": f"{scope}, max-age={CACHE_SECONDS}, immutable",
        "X-Content-Type-Options": "nosniff",
    }
    if _matches(request.headers.get("if-none-match"), etag):
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
    return FileResponse(record.path, media_type=record.content_type, headers=headers)


def _matches(if_none_match: str | None, etag: str) -> bool:
    """Return whether an If-None-Match header names this ETag (weak or strong) or `*`."""
    if not if_none_match:
        return False
    tags = {t.strip().removeprefix("W/") for t in if_none_match.split(",")}
    return "*" in tags or etag in tags


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=UploadedAsset,
    summary="Upload a reference image",
    openapi_extra=_UPLOAD_BODY,
    responses={
        200: {"model": UploadedAsset, "description": "These bytes were already stored."},
        413: {"description": "The image is larger than MAX_UPLOAD_BYTES."},
        415: {"description": "The bytes are not a PNG, JPEG or WEBP image."},
        422: {"description": "Malformed request (field named in the message)."},
    },
    dependencies=[WRITE],
)
async def upload_asset(
    request: Request, response: Response, assets: AssetsDep, settings: SettingsDep
) -> UploadedAsset:
    """Store a reference image sent as multipart or base64 JSON; return its id."""
    limit = settings.max_upload_bytes
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        data, filename = await _read_multipart(request, limit)
    elif content_type == "application/json":
        data, filename = await _read_base64(request, limit)
    else:
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            "Send the image as multipart/form-data (field 'file') or as application/json "
            '{"data": "<base64>"}.',
        )
    fmt, width, height = await run_in_threadpool(_decode, data)
    existed = await run_in_threadpool(assets.get, asset_id_for(data)) is not None
    meta = {"filename": filename} if filename else None
    record: AssetRecord = await assets.aput(data, UPLOAD_FORMATS[fmt], kind="uploaded", meta=meta)
    if existed:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = record.url
    return UploadedAsset(
        asset_id=record.asset_id,
        url=record.url,
        content_type=record.content_type,  # type: ignore[arg-type]
        width=width,
        height=height,
        bytes=record.bytes,
    )


async def _read_multipart(request: Request, limit: int) -> tuple[bytes, str | None]:
    """Return the bytes and file name of the multipart field `file`."""
    async with request.form(max_files=1, max_fields=10) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise _field_error(
                ("body", "file"), "missing", "Field required: a file part named 'file'"
            )
        data = await upload.read(limit + 1)
        filename = (upload.filename or "")[-MAX_FILENAME_CHARS:] or None
    _check_size(data, limit)
    return data, filename


async def _read_base64(request: Request, limit: int) -> tuple[bytes, str | None]:
    """Return the decoded bytes and file name of a JSON base64 upload."""
    try:
        body = Base64Upload.model_validate_json(await request.body())
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors()]
        ) from None
    text = "".join(_DATA_URL.sub("", body.data.strip(), count=1).split())
    if len(text) > -(-limit // 3) * 4:  # its decoded size would pass the limit
        raise _too_large(limit)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise _field_error(
            ("body", "data"), "base64", "Value is not valid base64 (RFC 4648 alphabet)"
        ) from None
    _check_size(data, limit)
    return data, body.filename


def _check_size(data: bytes, limit: int) -> None:
    """Refuse an empty upload (422) or one over the limit (413)."""
    if len(data) > limit:
        raise _too_large(limit)
    if not data:
        raise _field_error(("body", "file"), "empty", "The image is empty")


def _too_large(limit: int) -> HTTPException:
    return HTTPException(
        status.HTTP_413_CONTENT_TOO_LARGE,
        f"The image is larger than the upload limit of {limit} bytes (MAX_UPLOAD_BYTES).",
    )


def _decode(data: bytes) -> tuple[str, int, int]:
    """Decode an upload fully with Pillow; return (format, width, height) or raise 415/422.

    The header is read first: the format and the pixel count are checked before any
    pixel is decoded, then `load()` decodes the whole image, so a truncated or
    corrupt file with a valid header is refused too.
    """
    try:
        with Image.open(io.BytesIO(data)) as image:
            fmt, (width, height) = image.format, image.size
            if fmt in UPLOAD_FORMATS and width * height <= MAX_UPLOAD_PIXELS:
                image.load()
    except Image.DecompressionBombError:
        raise _too_many_pixels() from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise _unsupported() from None
    if fmt not in UPLOAD_FORMATS:
        raise _unsupported()
    if width * height > MAX_UPLOAD_PIXELS:
        raise _too_many_pixels(width, height)
    return fmt, width, height


def _too_many_pixels(width: int | None = None, height: int | None = None) -> RequestValidationError:
    size = f"{width}x{height} pixels" if width and height else "too many pixels"
    return _field_error(
        ("body", "file"),
        "too_many_pixels",
        f"The image has {size}; at most {MAX_UPLOAD_PIXELS} pixels are accepted",
    )


def _unsupported() -> HTTPException:
    return HTTPException(
        status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
        "The file is not a readable PNG, JPEG or WEBP image (checked by decoding it; "
        "the declared type and file name are not trusted).",
    )


def _field_error(loc: tuple[str, ...], kind: str, message: str) -> RequestValidationError:
    return RequestValidationError([{"type": kind, "loc": loc, "msg": message}])
