"""What `./dev` compiled: a llama.cpp that runs on any x86-64 CPU.

A llama.cpp compiled with `-march=native` on a CPU that reports AMX executes AMX
tile instructions (`ldtilecfg`, `tdpb*`) that crash the embedded model on cloud VMs
(issue 10; docs/models.md). The machine running the tests may lack AMX, so the
test looks at what was built rather than at whether it runs: the installed
`libggml-cpu` must contain no AMX tile instruction unless the native build was
asked for (`ATELIER_NATIVE_BUILD=1`, recorded in the venv's install stamp).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

#: AMX tile instructions: configuring the tiles, and the tile dot products.
AMX_INSTRUCTION = re.compile(r"\b(ldtilecfg|tdpb[a-z0-9]*|tdpfp16ps)\b")
STAMP = Path(sys.prefix) / ".atelier-install"


def native_build_chosen() -> bool:
    """Whether this venv's llama.cpp was built with the native opt-in (or the caller's flags)."""
    if os.environ.get("ATELIER_NATIVE_BUILD") == "1":
        return True
    lines = STAMP.read_text().splitlines() if STAMP.is_file() else []
    return "llama=native" in lines or any(line.startswith("llama=custom-") for line in lines)


def cpu_libraries() -> list[Path]:
    """The llama.cpp CPU backend libraries inside the installed llama_cpp package."""
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.submodule_search_locations, "llama-cpp-python is missing"
    found: set[Path] = set()
    for location in spec.submodule_search_locations:  # the .so links name one file
        found |= {path.resolve() for path in Path(location).rglob("libggml-cpu*.so*")}
    return sorted(found)


@pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="AMX exists on x86-64 only"
)
def test_installed_llama_cpp_has_no_amx_instructions_unless_native_was_chosen() -> None:
    if native_build_chosen():
        pytest.skip("native (or custom CMAKE_ARGS) build chosen: it may use this CPU's AMX")
    objdump = shutil.which("objdump")
    assert objdump, "objdump is missing: install binutils (.ci/run does)"
    libraries = cpu_libraries()
    assert libraries, "no libggml-cpu*.so under the llama_cpp package"
    for library in libraries:
        listing = subprocess.run(
            [objdump, "-d", "--no-show-raw-insn", str(library)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "\n" in listing and "<" in listing, f"objdump printed no code for {library}"
        found = sorted(set(AMX_INSTRUCTION.findall(listing)))
        assert not found, (
            f"{library.name} contains AMX tile instructions {found}: llama.cpp was compiled "
            "with -march=native; reinstall with ./dev (portable by default, docs/models.md)"
        )
