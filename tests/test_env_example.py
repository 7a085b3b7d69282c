"""Every setting is documented in .env.example, each with a comment above it."""

from __future__ import annotations

import re
from pathlib import Path

from core.settings import Settings

ENV_EXAMPLE = Path(__file__).resolve().parents[1] / ".env.example"


def test_every_setting_is_in_env_example_with_a_comment() -> None:
    lines = ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
    documented: dict[str, bool] = {}
    for i, line in enumerate(lines):
        match = re.match(r"^#? ?([A-Z][A-Z0-9_]+)=", line)
        if match:
            previous = lines[i - 1] if i else ""
            # A comment line (not another variable) right above: what the setting does.
            has_comment = previous.startswith("#") and not re.match(r"^# ?[A-Z0-9_]+=", previous)
            documented.setdefault(match.group(1), has_comment)
            documented[match.group(1)] |= has_comment
    names = {name.upper() for name in Settings.model_fields}
    missing = sorted(names - documented.keys())
    assert not missing, f".env.example lacks {missing}"
    uncommented = sorted(n for n in names if not documented[n])
    assert not uncommented, f"no comment above {uncommented} in .env.example"
    unknown = sorted(documented.keys() - names)
    assert not unknown, f".env.example names settings that do not exist: {unknown}"
