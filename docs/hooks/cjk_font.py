"""MkDocs hook: ship a small CJK web font with the site, so Chinese renders on any client.

The theme uses the reader's system fonts (`theme.font: false`: nothing is fetched from a
CDN). A client without a CJK font of its own (a bare Linux desktop, a headless browser)
would show the pages' Chinese as empty boxes, so after the build this hook subsets the
CJK font Atelier already ships for its cards (`providers.fonts.web_cjk_font`) to the
characters the built pages and the search index use, and writes it as
`assets/fonts/atelier-cjk.woff` (a few hundred KB). `docs/stylesheets/atelier.css` names
it after the usual system CJK fonts, so a browser downloads it only when it has none.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fontTools import subset

#: Where the subset lands in the site; docs/stylesheets/atelier.css points at it.
FONT_PATH = "assets/fonts/atelier-cjk.woff"
#: The Unicode blocks of Chinese text and its punctuation (the stylesheet's unicode-range).
CJK_RANGES = (
    (0x2E80, 0x2FFF),  # radicals
    (0x3000, 0x303F),  # CJK symbols and punctuation
    (0x3040, 0x30FF),  # kana
    (0x3400, 0x4DBF),  # extension A
    (0x4E00, 0x9FFF),  # unified ideographs
    (0xF900, 0xFAFF),  # compatibility ideographs
    (0xFE30, 0xFE4F),  # compatibility forms
    (0xFF00, 0xFFEF),  # full-width forms
)

log = logging.getLogger("mkdocs.hooks.cjk_font")


def on_post_build(config: Any) -> None:
    """Write the subset of the CJK font that the built site needs."""
    from providers.fonts import web_cjk_font  # the tree's own (settings_reference's on_config)

    site = Path(config.site_dir)
    text = "".join(
        path.read_text(encoding="utf-8", errors="ignore")
        for pattern in ("**/*.html", "search/*.json")
        for path in site.glob(pattern)
    )
    characters = sorted({char for char in text if is_cjk(char)})
    font = web_cjk_font()
    if not characters or font is None:
        log.info("no CJK font subset written (characters: %d, font: %s)", len(characters), font)
        return
    options = subset.Options()
    options.flavor = "woff"  # zlib-compressed; woff2 would need brotli
    options.layout_features = ["*"]
    options.name_IDs = ["*"]
    subsetter = subset.Subsetter(options)
    subsetter.populate(text="".join(characters))
    with subset.load_font(str(font[0]), options) as loaded:
        subsetter.subset(loaded)
        target = site / FONT_PATH
        target.parent.mkdir(parents=True, exist_ok=True)
        subset.save_font(loaded, str(target), options)


def is_cjk(char: str) -> bool:
    """Return whether a character falls in one of the CJK blocks."""
    point = ord(char)
    return any(low <= point <= high for low, high in CJK_RANGES)
