"""CJK text layout of the local cards: cleaning, wrapping without spaces, fitting a box.

Chinese has no spaces, so every CJK character is a break opportunity, Latin
words stay whole, and closing punctuation never starts a line (kinsoku).
`layout_text` picks the largest font size at which a text fits its box and
truncates with "…" at the smallest.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from PIL import ImageFont

from prompts.common import strip_data_markup

# CJK fonts carry no colour emoji; drawing them would leave empty boxes.
_EMOJI_RE = re.compile(
    "[\U0001f000-\U0001faff\U00002600-\U000027bf\U00002b00-\U00002bff"
    "\U0001f1e6-\U0001f1ff\ufe0f\u200d\u20e3]"
)
# A Latin word (kept whole, with trailing punctuation), a run of spaces, or one character.
_TOKEN_RE = re.compile(r"[0-9A-Za-zÀ-ɏ][0-9A-Za-zÀ-ɏ'’\-_.,:;!?%/&@#+]*|[ \t]+|.")
# Characters that must not start a line (CJK kinsoku + Latin closing punctuation).
_NO_LINE_START = frozenset("，。、；：！？）」』》〉】〕…,.;:!?)]}%”’·～")
_ELLIPSIS = "…"


def clean_text(text: str) -> str:
    """Drop emoji, light Markdown and prompt markup so the card shows plain, drawable text.

    Prompt delimiters (``<<<用户请求>>>``, `prompts.common.strip_data_markup`) that a
    model leaked into a title or section are never drawn: a card is for people.
    """
    text = strip_data_markup(text)
    text = _EMOJI_RE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = []
    for raw in text.split("\n"):
        line = re.sub(r"^\s{0,3}(#{1,6}|>)\s*", "", raw)
        line = re.sub(r"^\s*[-*+]\s+", "• ", line)
        line = line.replace("**", "").replace("__", "").replace("`", "")
        lines.append(re.sub(r"[ \t]+", " ", line).strip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def wrap(paragraph: str, font: ImageFont.FreeTypeFont, width: float) -> list[str]:
    """Wrap one paragraph to `width` pixels.

    Chinese has no spaces, so every CJK character is a break opportunity;
    Latin words break only at spaces (or by character when one word is wider
    than the line). Closing punctuation never starts a line: the previous
    character moves down with it.
    """
    pending = list(reversed(_TOKEN_RE.findall(paragraph)))
    lines: list[str] = []
    current: list[str] = []
    while pending:
        token = pending.pop()
        if token.isspace():
            if current:
                current.append(" ")
            continue
        if font.getlength(token) > width and len(token) > 1:
            pending.extend(reversed(list(token)))  # an over-long word: break it anywhere
            continue
        if not current or font.getlength("".join(current) + token) <= width:
            current.append(token)
            continue
        carried: list[str] = []
        words = [t for t in current if not t.isspace()]
        if token in _NO_LINE_START and len(words) > 1:
            carried = [current.pop()]
        lines.append("".join(current).rstrip())
        current = [*carried, token]
    if current:
        lines.append("".join(current).rstrip())
    return lines


def ellipsize(line: str, font: ImageFont.FreeTypeFont, width: float) -> str:
    """Return `line` shortened to end with "…" within `width` pixels."""
    text = line.rstrip(" ，。、；：,.;:")
    while text and font.getlength(text + _ELLIPSIS) > width:
        text = text[:-1].rstrip(" ，。、；：,.;:")
    return text + _ELLIPSIS


@dataclass(frozen=True)
class Line:
    text: str
    gap_before: float  # extra space above the line (paragraph spacing), in pixels


@dataclass(frozen=True)
class TextBlock:
    font: ImageFont.FreeTypeFont
    size: int
    lines: list[Line]
    line_height: float

    @property
    def height(self) -> float:
        return sum(line.gap_before for line in self.lines) + len(self.lines) * self.line_height


class Fonts:
    """FreeType faces of one font file by size, shared by every render (see `_face`)."""

    def __init__(self, path: Path, index: int) -> None:
        """Bind to one face (`index`) of the font file at `path`."""
        self._path = str(path)
        self._index = index

    def get(self, size: int) -> ImageFont.FreeTypeFont:
        """Return the face at `size` pixels."""
        return _face(self._path, self._index, size)


@functools.lru_cache(maxsize=16)
def _face(path: str, index: int, size: int) -> ImageFont.FreeTypeFont:
    """Load a face once and keep it: loading costs ~1 ms and ~2 MB per size of a CJK font.

    A card draws with a handful of sizes (badge, title or heading, body) out of
    a fixed few per card width that `layout_text` tries (up to 17 for a long
    cover title), so 16 faces keep the common ones while bounding the memory
    to ~32 MB. Sharing a face between render threads is safe: Pillow holds the
    GIL (on free-threaded builds, a per-font critical section) for each
    FreeType call.
    """
    return ImageFont.truetype(path, size=size, index=index)


def layout_text(
    text: str,
    fonts: Fonts,
    *,
    sizes: range,
    width: float,
    max_height: float,
    max_lines: int,
    line_spacing: float,
    paragraph_gap: float = 0.0,
) -> TextBlock:
    """Lay out `text` at the largest size that fits; truncate with "…" at the smallest."""
    paragraphs = [p for p in text.split("\n") if p.strip()]
    block: TextBlock | None = None
    for size in sizes:
        font = fonts.get(size)
        lines: list[Line] = []
        for index, paragraph in enumerate(paragraphs):
            # Consecutive list items sit closer than paragraphs.
            is_item = paragraph.startswith("• ") and paragraphs[index - 1].startswith("• ")
            gap = size * paragraph_gap * (0.4 if is_item else 1.0) if index else 0.0
            for n, wrapped in enumerate(wrap(paragraph, font, width)):
                lines.append(Line(wrapped, gap if n == 0 else 0.0))
        block = TextBlock(font, size, lines, size * line_spacing)
        if len(lines) <= max_lines and block.height <= max_height:
            return block
    assert block is not None, "sizes must not be empty"
    # Smallest size still overflows: keep what fits and mark the cut.
    kept: list[Line] = []
    used = 0.0
    for line in block.lines:
        needed = line.gap_before + block.line_height
        if len(kept) >= max_lines or used + needed > max_height:
            break
        kept.append(line)
        used += needed
    if kept:
        last = kept[-1]
        kept[-1] = Line(ellipsize(last.text, block.font, width), last.gap_before)
    return TextBlock(block.font, block.size, kept, block.line_height)


def chinese_face_index(path: Path) -> int:
    """Pick the Simplified Chinese face of a font collection (Noto CJK ships JP first)."""
    if path.suffix.lower() not in (".ttc", ".otc"):
        return 0
    for index in range(10):
        try:
            family = ImageFont.truetype(str(path), size=12, index=index).getname()[0] or ""
        except OSError:
            break
        if family.endswith((" SC", " GB")) or "Hei" in family:
            return index
    return 0
