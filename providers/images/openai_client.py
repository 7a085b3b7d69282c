"""The OpenAI images client: any OpenAI-compatible `/images/generations` endpoint."""

from __future__ import annotations

import asyncio
import base64
import binascii
import io

import httpx
from PIL import Image, ImageOps, UnidentifiedImageError
from pydantic import SecretStr

from providers.images.contract import GeneratedImage, ImageProviderError, ImageRequest
from providers.images.gate import DrawGate

_NO_TEXT = (
    "Do not render any text, letters, numbers, captions, logos or watermarks in the image; "
    "the post adds its own text."
)
_MAX_DOWNLOAD_BYTES = 32 * 1024 * 1024
_MAX_RETRY_AFTER_S = 30.0
_CONTENT_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}


class OpenAIImageProvider:
    """Generate images with an OpenAI-compatible `/images/generations` endpoint.

    Retries 429, 5xx, timeouts and connection errors up to `max_retries`
    times with exponential backoff (honouring a numeric `Retry-After`), then
    raises `ImageProviderError`. Errors never contain the API key. With
    `fit_to_request` (default) the result is centre-cropped and resized to
    the request's size (3:4 cards) and re-encoded as PNG. At most
    `concurrency` requests are in flight at once (`IMAGE_CONCURRENCY`): a
    post's images are drawn together, and the API is not flooded.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: SecretStr | str | None,
        *,
        model: str = "gpt-image-1",
        size: str = "1024x1536",
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff_base: float = 1.0,
        fit_to_request: bool = True,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        concurrency: int = 4,
    ) -> None:
        """Configure the endpoint.

        Args:
            base_url: API root, e.g. "https://api.openai.com/v1".
            api_key: Bearer token; None sends no Authorization header.
            model: Images model name.
            size: Requested size "WxH".
            timeout: Seconds per HTTP request.
            max_retries: Retries after the first attempt for retryable failures.
            backoff_base: First backoff delay in seconds (doubles per retry).
            fit_to_request: Crop/resize the result to the request's width × height.
            client: A client to use (not closed here); tests inject one.
            transport: A transport for the per-call client when `client` is None.
            concurrency: Requests in flight at once (a retry keeps its slot).
        """
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key if isinstance(api_key, SecretStr | None) else SecretStr(api_key)
        self.model = model
        self.size = size
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff_base = max(0.0, backoff_base)
        self.fit_to_request = fit_to_request
        self._client = client
        self._transport = transport
        self.gate = DrawGate(concurrency)

    def __repr__(self) -> str:
        """Describe the provider without its key."""
        return f"OpenAIImageProvider(base_url={self.base_url!r}, model={self.model!r})"

    def build_prompt(self, req: ImageRequest) -> str:
        """Return the prompt sent to the API: the visual brief, palette, format, and no text."""
        parts = [req.prompt.strip() or req.title.strip() or "An aesthetic lifestyle photo."]
        if req.kind == "cover":
            parts.append("Vertical cover image for a social media post, one clear focal subject.")
        else:
            parts.append("Vertical illustrative image for a social media post.")
        if req.title.strip():
            parts.append(f"Topic: {req.title.strip()}.")
        if req.palette:
            parts.append(f"Colour palette: {', '.join(req.palette)}.")
        parts.append(_NO_TEXT)
        return "\n".join(parts)[:4000]

    async def generate(self, req: ImageRequest) -> GeneratedImage:
        """Generate the image for `req`.

        Raises:
            ImageProviderError: The API failed after retries, rejected the
                request, or returned something that is not an image.
        """
        async with self.gate.slot():
            if self._client is not None:
                return await self._generate(self._client, req)
            timeout = httpx.Timeout(self.timeout, connect=min(10.0, self.timeout))
            async with httpx.AsyncClient(transport=self._transport, timeout=timeout) as client:
                return await self._generate(client, req)

    async def _generate(self, client: httpx.AsyncClient, req: ImageRequest) -> GeneratedImage:
        payload: dict[str, object] = {
            "model": self.model,
            "prompt": self.build_prompt(req),
            "size": self.size,
            "n": 1,
        }
        # gpt-image-* always answer base64 and reject `response_format` with a 400;
        # DALL·E and most compatible servers need it to return base64 instead of a URL.
        if not self.model.startswith("gpt-image"):
            payload["response_format"] = "b64_json"
        headers = {}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"

        url = f"{self.base_url}/images/generations"
        attempts = self.max_retries + 1
        failure = "no attempt made"
        for attempt in range(attempts):
            retry_after: float | None = None
            try:
                response = await client.post(url, json=payload, headers=headers)
            except httpx.TimeoutException:
                failure = "request timed out"
            except httpx.TransportError as exc:
                failure = f"connection failed ({type(exc).__name__})"
            else:
                status = response.status_code
                if status < 400:
                    data = await self._extract(client, response)
                    return await asyncio.to_thread(self._finish, data, req)
                detail = self._redact(_error_detail(response))
                if status != 429 and status < 500:
                    raise ImageProviderError(
                        f"images API rejected the request: HTTP {status}: {detail}",
                        status_code=status,
                    )
                failure = f"HTTP {status}: {detail}"
                retry_after = _retry_after(response)
            if attempt + 1 < attempts:
                delay = self.backoff_base * 2**attempt
                if retry_after is not None:
                    delay = max(delay, retry_after)
                await asyncio.sleep(min(delay, _MAX_RETRY_AFTER_S))
        raise ImageProviderError(f"images API failed after {attempts} attempt(s): {failure}")

    async def _extract(self, client: httpx.AsyncClient, response: httpx.Response) -> bytes:
        """Return the image bytes of a success response (inline base64 or a URL to fetch)."""
        try:
            item = response.json()["data"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ImageProviderError("images API answered without data[0]") from exc
        if isinstance(item, dict) and item.get("b64_json"):
            try:
                return base64.b64decode(item["b64_json"], validate=True)
            except (binascii.Error, ValueError, TypeError) as exc:
                raise ImageProviderError("images API returned invalid base64") from exc
        if isinstance(item, dict) and isinstance(item.get("url"), str):
            # Fetched without the Authorization header: the URL may be a CDN's.
            try:
                download = await client.get(item["url"])
            except httpx.HTTPError as exc:
                raise ImageProviderError(
                    f"could not download the generated image ({type(exc).__name__})"
                ) from exc
            if download.status_code >= 400:
                raise ImageProviderError(
                    f"could not download the generated image: HTTP {download.status_code}",
                    status_code=download.status_code,
                )
            if len(download.content) > _MAX_DOWNLOAD_BYTES:
                raise ImageProviderError("generated image download is too large")
            return download.content
        raise ImageProviderError("images API answered with neither b64_json nor url")

    def _finish(self, data: bytes, req: ImageRequest) -> GeneratedImage:
        """Check the bytes are an image and, if asked, fit them to the request's size."""
        try:
            with Image.open(io.BytesIO(data)) as probe:
                probe.verify()
            with Image.open(io.BytesIO(data)) as img:
                fmt = img.format or ""
                if not self.fit_to_request:
                    if fmt not in _CONTENT_TYPES:
                        raise ImageProviderError(f"images API returned unsupported format {fmt!r}")
                    return GeneratedImage(
                        data=data,
                        content_type=_CONTENT_TYPES[fmt],
                        width=img.width,
                        height=img.height,
                    )
                fitted = ImageOps.fit(
                    img.convert("RGB"), (req.width, req.height), Image.Resampling.LANCZOS
                )
        except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
            raise ImageProviderError("images API returned data that is not an image") from exc
        buffer = io.BytesIO()
        fitted.save(buffer, format="PNG", compress_level=6)
        return GeneratedImage(
            data=buffer.getvalue(), content_type="image/png", width=req.width, height=req.height
        )

    def _redact(self, text: str) -> str:
        """Remove the API key from text that may echo it (some servers quote the key)."""
        if self._api_key is not None:
            secret = self._api_key.get_secret_value()
            if secret:
                text = text.replace(secret, "***")
        return text


def _error_detail(response: httpx.Response) -> str:
    """Return the API's error message, shortened, for logs."""
    try:
        body = response.json()
        message = body.get("error", {}).get("message") if isinstance(body, dict) else None
    except ValueError:
        message = None
    text = message if isinstance(message, str) and message else response.text
    return " ".join(text.split())[:300] or response.reason_phrase


def _retry_after(response: httpx.Response) -> float | None:
    """Return a numeric `Retry-After` in seconds, if the server sent one."""
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
