"""Find a font that can draw Chinese text for the local image cards.

Pillow's built-in bitmap font has no CJK glyphs: a card drawn with it shows
empty boxes instead of 汉字. The local card provider therefore needs a real
CJK-capable TrueType/OpenType font. `find_cjk_font` takes the configured
`FONT_PATH` when there is one, and otherwise searches the places where Linux
distributions, macOS and Windows install such fonts, then fontconfig, and last
the Noto Sans CJK SC face that the PyPI package `mplfonts` ships (SIL OFL), so a
fresh machine with nothing but Python and PyPI still draws Chinese. The package
is only located on disk, never imported: importing it would pull in matplotlib.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

# Well-known CJK-capable fonts, best first. Regular weights only: the card
# renderer fakes bold with a stroke, so one face is enough.
KNOWN_CJK_FONTS: tuple[str, ...] = (
    # Debian/Ubuntu: fonts-wqy-microhei, fonts-wqy-zenhei, fonts-noto-cjk.
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc",
    "/usr/share/fonts/truetype/noto/NotoSansCJK-Regular.ttc",
    # Fedora/Arch/Alpine layouts of the same packages.
    "/usr/share/fonts/wqy-microhei/wqy-microhei.ttc",
    "/usr/share/fonts/wqy-zenhei/wqy-zenhei.ttc",
    "/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/google-noto-sans-cjk-fonts/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJKsc-Regular.otf",
    "/usr/share/fonts/noto/NotoSansCJK-Regular.ttc",
    # macOS.
    "/System/Library/Fonts/PingFang.ttc",
    "/System/Library/Fonts/STHeiti Medium.ttc",
    "/System/Library/Fonts/STHeiti Light.ttc",
    "/System/Library/Fonts/Hiragino Sans GB.ttc",
    "/Library/Fonts/Arial Unicode.ttf",
    # Windows.
    "C:/Windows/Fonts/msyh.ttc",
    "C:/Windows/Fonts/msyh.ttf",
    "C:/Windows/Fonts/simhei.ttf",
    "C:/Windows/Fonts/simsun.ttc",
)

#: Fonts shipped by PyPI packages, as (package, path inside the package), best first.
PACKAGED_CJK_FONTS: tuple[tuple[str, str], ...] = (("mplfonts", "fonts/NotoSansCJKsc-Regular.otf"),)

# Extensions FreeType (and so Pillow) opens; fc-list also reports bitmap fonts.
_FONT_SUFFIXES = frozenset({".ttf", ".ttc", ".otf", ".otc"})

_FIX_HINT = (
    "Install one (`pip install mplfonts`, or on Debian/Ubuntu `apt-get install "
    "fonts-wqy-microhei` or `fonts-noto-cjk`) or set FONT_PATH to a CJK-capable "
    ".ttf/.ttc/.otf file."
)


class FontNotFoundError(RuntimeError):
    """No usable CJK-capable font: the message says how to install or configure one."""


def find_cjk_font(explicit: str | Path | None = None) -> Path:
    """Return the path of a CJK-capable font, searching the system when none is given.

    An explicit path (the `FONT_PATH` setting) wins and is never silently
    replaced by a system font: a wrong setting fails loudly instead of
    rendering with a font the operator did not choose.

    Args:
        explicit: A font file to use, or None to search well-known locations
            and then `fc-list :lang=zh`.

    Returns:
        The absolute path of the font file.

    Raises:
        FontNotFoundError: The explicit path is not a readable font file, or
            no CJK-capable font is installed.
    """
    resolved = Path(explicit).expanduser().resolve() if explicit else None
    return _find_cjk_font_cached(resolved)


def clear_font_cache() -> None:
    """Forget earlier lookups (after installing a font, or in tests)."""
    _find_cjk_font_cached.cache_clear()


@functools.cache
def _find_cjk_font_cached(explicit: Path | None) -> Path:
    # Only successful lookups are cached: functools.cache does not store raises,
    # so installing a font later is picked up without a restart.
    if explicit is not None:
        if not explicit.is_file():
            raise FontNotFoundError(f"FONT_PATH {str(explicit)!r} does not exist. {_FIX_HINT}")
        if explicit.suffix.lower() not in _FONT_SUFFIXES:
            raise FontNotFoundError(
                f"FONT_PATH {str(explicit)!r} is not a TrueType/OpenType font. {_FIX_HINT}"
            )
        return explicit
    for candidate in KNOWN_CJK_FONTS:
        path = Path(candidate)
        if path.is_file():
            return path
    found = _fontconfig_cjk_font() or _packaged_cjk_font()
    if found is not None:
        return found
    raise FontNotFoundError(f"No CJK-capable font found on this machine. {_FIX_HINT}")


def _fontconfig_cjk_font() -> Path | None:
    """Ask fontconfig for any font covering Chinese, when fontconfig is installed."""
    fc_list = shutil.which("fc-list")
    if fc_list is None:
        return None
    try:
        result = subprocess.run(
            [fc_list, ":lang=zh", "file"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    # Each line reads "/path/to/font.ttc: "; sort so the choice is stable.
    paths = sorted(
        Path(line.split(":", 1)[0].strip()) for line in result.stdout.splitlines() if line.strip()
    )
    for path in paths:
        if path.suffix.lower() in _FONT_SUFFIXES and path.is_file():
            return path
    return None


def _packaged_cjk_font() -> Path | None:
    """Return a CJK font shipped inside an installed PyPI package, if any."""
    for package, relative in PACKAGED_CJK_FONTS:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            path = Path(location) / relative
            if path.is_file():
                return path
    return None


#: Font files browsers load with @font-face (collections such as .ttc are not).
_WEB_FONT_TYPES = {
    ".otf": "font/otf",
    ".ttf": "font/ttf",
    ".woff": "font/woff",
    ".woff2": "font/woff2",
}


def web_cjk_font(explicit: str | Path | None = None) -> tuple[Path, str] | None:
    """Return a CJK font a browser can load, with its media type, or None.

    The console offers it as a last-resort web font so Chinese renders on a client
    with no CJK font of its own (a bare Linux desktop, a headless browser). Browsers
    cannot load font collections (.ttc), so: `FONT_PATH` when it is a single font,
    else the face `mplfonts` ships (always installed with Atelier), else a system one.
    """

    def candidates() -> Iterator[Path | None]:  # lazily: the system search runs last, if at all
        yield Path(explicit) if explicit else None
        yield _packaged_cjk_font()
        with contextlib.suppress(FontNotFoundError):
            yield find_cjk_font()

    for path in candidates():
        if path is not None and path.is_file() and path.suffix.lower() in _WEB_FONT_TYPES:
            return path, _WEB_FONT_TYPES[path.suffix.lower()]
    return None
