"""Segmentation helpers: jieba is loaded lazily, once and quietly."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from knowledge.segment import cut, cut_for_search, has_cjk, normalize


def test_normalize_folds_case_and_full_width() -> None:
    assert normalize("ＡＰＩ（Test）") == "api(test)"


def test_cut_drops_punctuation_and_handles_non_chinese_without_jieba() -> None:
    assert cut("数据库连接失败。") == ["数据库", "连接", "失败"]
    assert cut("database, connection!") == ["database", "connection"]
    assert "数据库" in cut_for_search("数据库连接失败")
    assert has_cjk("abc数据") and not has_cjk("abc")


def test_concurrent_first_use_is_safe() -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(cut, ["学生党平价护肤"] * 16))
    assert all(r == results[0] for r in results)


def test_loading_the_dictionary_prints_nothing() -> None:
    code = "from knowledge.segment import cut; cut('学生党平价护肤')"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert done.stdout == "" and done.stderr == ""
