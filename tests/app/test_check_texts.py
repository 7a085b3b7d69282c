"""The console says in both languages what each platform and advertising-law check found."""

from __future__ import annotations

import re

import pytest

from agentkit.compliance import check_compliance
from agentkit.platform_checks import check_platform
from agentkit.platforms import PLATFORM_IDS
from app.main import STATIC_DIR


def check_names() -> set[str]:
    post = {"title": "t", "body": "b", "tags": ["a"]}
    names = {
        row.name
        for platform in PLATFORM_IDS
        for row in [
            *check_platform(post, platform, image_count=1),
            *check_compliance(post, platform),
        ]
    }
    assert "ad_law" in names and "platform_shots" in names and "platform_thread" in names
    return names


@pytest.mark.parametrize("name", sorted(check_names()))
def test_every_new_check_has_a_sentence_and_a_name_in_zh_and_en(name: str) -> None:
    script = (STATIC_DIR / "console.js").read_text(encoding="utf-8")
    assert len(re.findall(rf'"check\.{name}": "', script)) == 2, name
    assert len(re.findall(rf'"check\.{name}\.name": "', script)) == 2, name
