"""Text normalisation and Chinese word segmentation for the knowledge vault.

Chinese has no spaces between words, so matching a query word by word needs a
real segmenter; this module wraps jieba. jieba loads a ~5 MB dictionary (file
reads, a cache file in the temp directory, about a second of CPU) and logs to
stderr while doing so, so the tokenizer is built once, under a lock, with its
logger turned down to warnings: at start-up by `load_dictionary` (a server calls
it from a worker thread, never on its event loop), else on first use.
Everything else here is pure.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from typing import Any

_CJK_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff]")
# A token is worth matching when it has at least one letter, digit or CJK character.
_WORDLIKE_RE = re.compile(r"\w", re.UNICODE)
_CHUNK_SPLIT_RE = re.compile(r"[\W_]+", re.UNICODE)

_tokenizer: Any = None  # the lazily built jieba.Tokenizer; see _jieba()
_tokenizer_lock = threading.Lock()


def _jieba() -> Any:
    """Return the process-wide jieba tokenizer, building it on first use.

    Double-checked locking: building takes about a second, and concurrent first
    callers (threads of a server) must not each load the dictionary.
    """
    global _tokenizer
    if _tokenizer is None:
        with _tokenizer_lock:
            if _tokenizer is None:
                import jieba

                # jieba announces its dictionary load on stderr at DEBUG level;
                # a library must not print, so only warnings get through.
                jieba.setLogLevel(logging.WARNING)
                tokenizer = jieba.Tokenizer()
                tokenizer.initialize()
                _tokenizer = tokenizer
    return _tokenizer


def load_dictionary() -> None:
    """Load jieba's dictionary now (blocking, idempotent), so no later call has to.

    Servers call it at start-up, in a worker thread: loading on the event loop
    would stall every run for about a second (and `langgraph dev` rejects it).
    """
    _jieba()


def normalize(text: str) -> str:
    """Fold text for case-insensitive matching.

    NFKC turns full-width forms into their ASCII equivalents ("ＡＰＩ" → "api",
    "（" → "("), and casefold is the Unicode-correct lower-casing.
    """
    return unicodedata.normalize("NFKC", text).casefold()


def has_cjk(text: str) -> bool:
    """Return whether text contains a CJK ideograph."""
    return _CJK_RE.search(text) is not None


def is_wordlike(token: str) -> bool:
    """Return whether a token carries a letter, digit or ideograph (not only punctuation)."""
    return _WORDLIKE_RE.search(token) is not None and token.strip() != ""


def chunks(text: str) -> list[str]:
    """Split text on whitespace and punctuation into runs of word characters."""
    return [part for part in _CHUNK_SPLIT_RE.split(text) if part]


def cut(text: str) -> list[str]:
    """Segment text into words (jieba's precise mode), dropping punctuation and spaces.

    Text without CJK characters is split on non-word characters instead, which is
    what jieba would do for it anyway, without loading the dictionary.
    """
    if not has_cjk(text):
        return chunks(text)
    return [tok for tok in _jieba().lcut(text) if is_wordlike(tok)]


def cut_for_search(text: str) -> list[str]:
    """Segment text for search: precise words plus the dictionary words inside long ones.

    For "数据库连接失败" this gives "数据", "据库", "数据库", "连接", "失败".
    """
    if not has_cjk(text):
        return chunks(text)
    return [tok for tok in _jieba().lcut_for_search(text) if is_wordlike(tok)]
