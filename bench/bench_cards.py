"""Benchmark the local card renderer: cost per 1080×1440 PNG card, as a run draws it.

    .venv/bin/python bench/bench_cards.py [--cards 40] [--ref GIT_REV] [--fresh-palettes]
        [--concurrency 1]

Each card goes the way a run sends it: `agentkit.tools.image_request` builds the
request from a post (cover: title over the brief's goal; content cards: one
section each), `LocalCardProvider.generate` renders it in a worker thread and
`AssetStore.aput` stores the PNG. Posts cycle through four palettes (a
reference's, the default, a dark one, a single colour), or with
`--fresh-palettes` each has a palette of its own, and every post's title
carries its number, so no two cards are the same bytes and every one is
written. The first card (font loading) is timed apart; the rest give the
steady state: wall ms and process CPU seconds per card (all threads), the mean
PNG size, and the process RSS after the warm-up, after half the cards and
after the last (a cache that grows with the cards shows up as the last exceeding
the middle one).

With `--ref REV` the same cards are also drawn by the code of git revision REV
(its tree exported to a temp dir), each side in its own fresh process, one
after the other, and printed side by side with the ratio and a pixel
comparison of the two sides' cards (PNG bytes may differ with the compression
level while the pixels do not).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

PALETTES: tuple[list[str] | None, ...] = (
    ["#f7e6d7", "#e07a5f", "#3d405b"],
    None,
    ["#101820", "#f2aa4c", "#5b84b1"],
    ["#cfe3d4"],
)
TITLE = "学生党平价护肤：3步搞定"
GOAL = "讲清楚平价护肤的关键成分和步骤"
SECTIONS = (
    (
        "第一步：温和清洁",
        "选氨基酸洁面，早晚各一次，洗完不紧绷才是对的。\n- 早上清水也可以\n- 晚上认真卸妆",
    ),
    (
        "第二步：补水保湿 Moisturise",
        "含透明质酸、甘油的保湿乳足够日常，价格几十元就能买到。Start with a light lotion, "
        "then add a cream in winter if your skin feels tight.",
    ),
    (
        "第三步：认真防晒",
        "白天出门前涂足量防晒，这是最划算的抗老方式。成分看懂了，就不会被营销牵着走。",
    ),
)
CARDS_PER_POST = 1 + len(SECTIONS)


def _rss_kib() -> int:
    """Return the process's resident set size in KiB (Linux /proc), 0 where unknown."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _palette(post: int, fresh: bool) -> list[str] | None:
    """Return post `post`'s palette: one of `PALETTES` in turn, or with `fresh` one of its own."""
    if not fresh:
        return PALETTES[post % len(PALETTES)]
    # Distinct colours per post (up to 64^2 posts): no two posts share a background.
    return [f"#f7{0xA0 + post % 64:02x}{0x90 + post // 64 % 64:02x}", "#e07a5f", "#3d405b"]


def _requests(cards: int, fresh: bool) -> list[Any]:
    """Return `cards` image requests built by the image tool's own `image_request`."""
    from agentkit.tools import image_request

    requests: list[Any] = []
    post = 0
    while len(requests) < cards:
        palette = _palette(post, fresh)
        state = {
            "creative_brief": {"topic": "平价护肤", "goal": GOAL},
            "generated_content": {"title": f"{TITLE}（{post + 1}）"},
            "body_blocks": [{"heading": h, "text": t} for h, t in SECTIONS],
            "reference_analyses": {"palette": palette or []},
        }
        for slot in range(1, CARDS_PER_POST + 1):
            plan = {
                "slot": slot,
                "type": "cover" if slot == 1 else "content",
                "desc": f"第{slot}张",
                "prompt": f"平价护肤产品平铺，柔和自然光（第{slot}张）",
            }
            requests.append(image_request(plan, state))
        post += 1
    return requests[:cards]


async def _draw(cards: int, concurrency: int, fresh: bool, assets_dir: Path) -> dict[str, Any]:
    """Draw the cards with this process's code; return the figures."""
    from providers.assets import AssetStore
    from providers.images import LocalCardProvider

    provider = LocalCardProvider()
    store = AssetStore(assets_dir)
    requests = _requests(cards + 1, fresh)

    async def one(req: Any) -> tuple[str, int]:
        image = await provider.generate(req)
        record = await store.aput(
            image.data, image.content_type, meta={"slot": req.slot, "prompt": req.prompt}
        )
        return str(record.path), record.bytes

    wall, cpu = time.perf_counter(), time.process_time()
    drawn = [await one(requests[0])]
    first_wall, first_cpu = time.perf_counter() - wall, time.process_time() - cpu
    rss_warm = _rss_kib()

    gate = asyncio.Semaphore(concurrency)

    async def gated(req: Any) -> tuple[str, int]:
        async with gate:
            return await one(req)

    rest = requests[1:]
    halves = (rest[: cards // 2], rest[cards // 2 :])
    rss_half = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for half in halves:
        # In request order either way (gather keeps it), so both sides pair card by card.
        if concurrency == 1:
            drawn += [await one(req) for req in half]
        else:
            drawn += await asyncio.gather(*(gated(r) for r in half))
        rss_half = rss_half or _rss_kib()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "code": str(Path(sys.modules[LocalCardProvider.__module__].__file__ or "")),
        "first_ms": first_wall * 1000,
        "first_cpu_s": first_cpu,
        "ms_per_card": wall * 1000 / cards,
        "cpu_s_per_card": cpu / cards,
        "png_bytes": sum(size for _, size in drawn[1:]) / cards,
        "rss_warm_mib": rss_warm / 1024,
        "rss_half_mib": rss_half / 1024,
        "rss_end_mib": _rss_kib() / 1024,
        "paths": [path for path, _ in drawn],
    }


def _child(root: Path, cards: int, concurrency: int, fresh: bool, assets_dir: Path) -> None:
    """Draw with the code under `root` and print the figures as one JSON line."""
    sys.path.insert(0, str(root))
    figures = asyncio.run(_draw(cards, concurrency, fresh, assets_dir))
    print(json.dumps(figures))


def _run_side(
    root: Path, cards: int, concurrency: int, fresh: bool, assets_dir: Path
) -> dict[str, Any]:
    """Run one side in a fresh interpreter; return its figures."""
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(root),
            "--cards",
            str(cards),
            "--concurrency",
            str(concurrency),
            "--assets",
            str(assets_dir),
            *(["--fresh-palettes"] if fresh else []),
        ],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _export(rev: str, into: Path) -> str:
    """Write the tree of git revision `rev` under `into`; return its short hash."""
    short = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", rev],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(REPO_ROOT), "archive", rev], check=True, stdout=out)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return short


def _compare_pixels(ref_paths: list[str], new_paths: list[str]) -> tuple[int, int]:
    """Return (cards whose pixels differ, largest channel difference) between two sides."""
    from PIL import Image, ImageChops

    differing, worst = 0, 0
    for a, b in zip(ref_paths, new_paths, strict=True):
        with Image.open(a) as ia, Image.open(b) as ib:
            diff = ImageChops.difference(ia.convert("RGB"), ib.convert("RGB"))
        extrema = diff.getextrema()
        top = max(hi for _, hi in extrema)  # type: ignore[misc]
        if top:
            differing += 1
            worst = max(worst, top)
    return differing, worst


def _digest(paths: list[str]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:12]


ROWS = (
    ("first card, ms (font load)", "first_ms", "{:.1f}"),
    ("first card, CPU s", "first_cpu_s", "{:.3f}"),
    ("ms per card", "ms_per_card", "{:.1f}"),
    ("CPU s per card", "cpu_s_per_card", "{:.4f}"),
    ("PNG bytes per card", "png_bytes", "{:.0f}"),
    ("RSS after 1 card, MiB", "rss_warm_mib", "{:.1f}"),
    ("RSS after half, MiB", "rss_half_mib", "{:.1f}"),
    ("RSS after all cards, MiB", "rss_end_mib", "{:.1f}"),
)


def main() -> None:
    """Draw the cards on one or both sides and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cards", type=int, default=40, help="cards timed after the first")
    parser.add_argument("--concurrency", type=int, default=1, help="cards drawn at once")
    parser.add_argument(
        "--fresh-palettes",
        action="store_true",
        help="give every post a palette of its own (default: posts cycle through four)",
    )
    parser.add_argument("--ref", help="also draw with this git revision's code, side by side")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--assets", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child, args.cards, args.concurrency, args.fresh_palettes, args.assets)
        return

    print(
        f"{args.cards} cards (+1 warm-up) of {CARDS_PER_POST} per post, "
        f"{'a palette of its own' if args.fresh_palettes else 'four palettes in turn'}, "
        f"concurrency {args.concurrency}, Python {sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory(prefix="atelier-cards-") as tmp:
        sides: list[tuple[str, dict[str, Any]]] = []
        if args.ref:
            short = _export(args.ref, Path(tmp))
            ref = _run_side(
                Path(tmp) / "tree",
                args.cards,
                args.concurrency,
                args.fresh_palettes,
                Path(tmp) / "a",
            )
            sides.append((f"ref {short}", ref))
        new = _run_side(
            REPO_ROOT, args.cards, args.concurrency, args.fresh_palettes, Path(tmp) / "b"
        )
        sides.append(("worktree", new))

        header = f"{'':28}" + "".join(f"{name:>16}" for name, _ in sides)
        if len(sides) == 2:
            header += f"{'new/ref':>10}"
        print(header)
        for label, key, fmt in ROWS:
            line = f"{label:28}" + "".join(f"{fmt.format(s[key]):>16}" for _, s in sides)
            if len(sides) == 2 and sides[0][1][key]:
                line += f"{sides[1][1][key] / sides[0][1][key]:>10.2f}"
            print(line)
        for name, side in sides:
            print(f"{name}: {side['code']}")
        print(f"{'PNG bytes digest':28}" + "".join(f"{_digest(s['paths']):>16}" for _, s in sides))
        if len(sides) == 2:
            differing, worst = _compare_pixels(sides[0][1]["paths"], sides[1][1]["paths"])
            total = len(sides[0][1]["paths"])
            print(f"cards whose pixels differ: {differing}/{total}, largest channel diff {worst}")


if __name__ == "__main__":
    main()
