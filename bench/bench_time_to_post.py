"""Benchmark the time from "send" to a finished post, and what the post costs in LLM calls.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_time_to_post.py [--ref GIT_REV]
        [--latency 1.0] [--base 0.3] [--per-token 0.02] [--prefill 0.00025] [--runs 1]
        [--modes fast normal] [--settings call token] [--supervisors plans one-step]

(issue 28's acceptance figures: `--ref` the commit before the change, the defaults.)
The README's request (`写一篇小红书笔记：平价护肤，学生党友好`, one image,
`auto_confirm`) runs through the `atelier` pipeline (LangGraph `astream` of the
served graph, on the services `atelier serve` opens) in fast mode and in normal
mode, against the scripted model of `tests/app/atelier_llm.py` (`atelier_responder`)
served over the OpenAI wire on loopback by this process, under two latency settings:

* **call**: every answer after `--latency` seconds (1 s, issue 13's setting);
* **token**: `--base` seconds, plus `--prefill` per prompt token and `--per-token`
  per completion token (token counts as the scripted server reports them), so a
  long prompt or a long answer costs more.

Each side (the worktree, and with `--ref REV` the tree of revision REV exported to a
temporary directory) runs in a fresh interpreter with its own code on `sys.path`; the
scripted model stays in this process, the same for both sides but for the first
supervisor decision's plan: both are answered the plan of the whole normal path, the
worktree in the agents' short names its supervisor prompt asks for
(`short_names=True`), the ref side in the full names it has always been answered
(a supervisor before issue 28 ignores the plan; its answer is unchanged). A side first runs the
request once with an instant model (imports, fonts, jieba), then `--runs` timed runs.
Both supervisors a user meets are measured (`--supervisors`): one that plans ahead with
steps run together (`plans`, the friendly case), and one that names one agent per
decision and never plans (`one-step`: a model that leaves the optional `plan` empty).
Printed per mode and setting, side by side with the ratio new/ref:

* time to post: wall seconds from the run's start to its last chunk (mean);
* LLM calls per post and calls on the critical path (the longest chain of calls each
  starting after the previous one answered, `bench_load.critical_path`);
* prompt and completion tokens per post;
* then per role (told apart by the tools a request binds, as the model factory sends
  them): calls and prompt tokens per post.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

REQUEST = "写一篇小红书笔记：平价护肤，学生党友好"

#: Roles told apart by the tool a request forces (the structured answers).
FORCED_ROLES = {
    "PlannerIntent": "planner",
    "JudgeVerdict": "judge",
    "SupervisorDecision": "supervisor",
    "CreativeBrief": "brief_compiler_agent",
    "EvidencePack": "research_evidence_agent",
    "search_knowledge": "research_evidence_agent",
    "ReferenceAnalysis": "reference_intelligence_agent",
    "LayoutSpec": "layout_planner_agent",
    "ImagePlans": "image_planner_agent",
    "ReviewResult": "review_agent",
}


def run_input(mode: str) -> dict[str, Any]:
    """Return the README's request in `mode` ("fast" or "normal")."""
    body: dict[str, Any] = {"request": REQUEST, "auto_confirm": True, "image_count": 1}
    if mode == "fast":
        body["fast_mode"] = True
    return body


def role_of(req: Any) -> str:
    """Name the role that sent a chat request, by the tool it forces or binds."""
    if req.forced_tool in FORCED_ROLES:
        return FORCED_ROLES[req.forced_tool]
    tools = set(req.tools)
    if "SupervisorDecision" in tools:
        return "supervisor"
    if "EvidencePack" in tools or "search_knowledge" in tools:
        return "research_evidence_agent"
    if "generate_image" in tools:
        return "image_agent"
    return "writer_agent" if not tools else "other"


@dataclass
class Call:
    """One chat request the scripted model answered."""

    role: str
    arrived: float
    latency: float
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Recorder:
    """The scripted model with a latency setting; records every call it answers."""

    setting: dict[str, float] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        from tests.app.atelier_llm import atelier_responder

        #: The responder of each side and supervisor (`plans` or `one-step`).
        self.sides = {
            ("ref", "plans"): atelier_responder(plans=True),
            ("worktree", "plans"): atelier_responder(plans=True, short_names=True),
            ("ref", "one-step"): atelier_responder(plans=False),
            ("worktree", "one-step"): atelier_responder(plans=False),
        }
        self.supervisor = "plans"
        self.inner = self.sides[("worktree", "plans")]

    def latency(self, prompt: int, completion: int) -> float:
        """Seconds an answer takes under the current setting."""
        s = self.setting
        return (
            s.get("latency", 0.0)
            + s.get("prefill", 0.0) * prompt
            + s.get("per_token", 0.0) * completion
        )

    def __call__(self, req: Any) -> Any:
        from tests.support.scripted_openai import Reply, usage_of

        reply = self.inner(req)
        usage = usage_of(req, reply)
        delay = self.latency(usage["prompt_tokens"], usage["completion_tokens"])
        call = Call(
            role_of(req),
            time.monotonic(),
            delay,
            usage["prompt_tokens"],
            usage["completion_tokens"],
        )
        with self.lock:
            self.calls.append(call)
        return Reply.delay(delay, reply) if delay else reply


def critical_path(calls: list[Call]) -> int:
    """Return the longest chain of calls where each starts after the previous one answered."""
    chain = [0] * len(calls)
    ordered = sorted(calls, key=lambda c: c.arrived)
    for i, call in enumerate(ordered):
        before = [
            chain[j]
            for j, prev in enumerate(ordered[:i])
            if prev.arrived + prev.latency <= call.arrived + 0.01
        ]
        chain[i] = 1 + max(before, default=0)
    return max(chain, default=0)


# --------------------------------------------------------------------------- child side


async def _child_runs(llm_url: str, data_dir: Path, mode: str, runs: int) -> None:
    """Run the request: once to warm up, then `runs` times on the parent's signal."""
    from langgraph.checkpoint.memory import InMemorySaver

    from graphs.served import atelier, served_services
    from tests.app.harness import service_settings

    settings = service_settings(data_dir, llm_url, llm_timeout=600)
    async with served_services(settings):
        graph = atelier.copy(update={"checkpointer": InMemorySaver()})

        async def once() -> dict[str, Any]:
            started = time.monotonic()
            values: dict[str, Any] = {}
            async for mode_, chunk in graph.astream(
                run_input(mode),
                {"configurable": {"thread_id": str(uuid.uuid4())}},
                context={},
                stream_mode=["custom", "updates", "values"],
            ):
                if mode_ == "values":
                    values = chunk
            ended = time.monotonic()
            result = values.get("result") or {}
            return {
                "started": started,
                "ended": ended,
                "outcome": result.get("outcome"),
                "images": len((values.get("result") or {}).get("images") or []),
            }

        await once()
        print("warm", flush=True)
        sys.stdin.readline()
        timed = [await once() for _ in range(runs)]
    print(json.dumps(timed), flush=True)


def _child(root: Path, llm_url: str, data_dir: Path, mode: str, runs: int) -> None:
    sys.path.insert(0, str(root))
    asyncio.run(_child_runs(llm_url, data_dir, mode, runs))


# --------------------------------------------------------------------------- parent side


def _run_side(
    root: Path, recorder: Recorder, llm_url: str, mode: str, setting: dict[str, float], runs: int
) -> dict[str, Any]:
    """Run one side's posts in a fresh interpreter; return its figures."""
    recorder.setting = {}
    side = "worktree" if root == REPO_ROOT else "ref"
    recorder.inner = recorder.sides[(side, recorder.supervisor)]
    with tempfile.TemporaryDirectory(prefix="atelier-ttp-") as data_dir:
        env = {**os.environ, "PYTHONPATH": str(root)}
        child = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                str(root),
                "--llm-url",
                llm_url,
                "--data-dir",
                data_dir,
                "--mode",
                mode,
                "--runs",
                str(runs),
            ],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None
        line = child.stdout.readline()
        if line.strip() != "warm":
            child.kill()
            raise RuntimeError(f"the {root} side failed to warm up: {line!r}")
        recorder.setting = setting
        with recorder.lock:
            recorder.calls.clear()
        child.stdin.write("go\n")
        child.stdin.flush()
        out, _ = child.communicate()
        if child.returncode:
            raise RuntimeError(f"the {root} side exited {child.returncode}")
    timed = json.loads(out.strip().splitlines()[-1])
    with recorder.lock:
        calls = list(recorder.calls)
    per_run = [[c for c in calls if r["started"] <= c.arrived <= r["ended"]] for r in timed]
    n = len(timed)
    roles: Counter[str] = Counter()
    role_prompt: Counter[str] = Counter()
    for run in per_run:
        for c in run:
            roles[c.role] += 1
            role_prompt[c.role] += c.prompt_tokens
    return {
        "outcomes": [r["outcome"] for r in timed],
        "images": [r["images"] for r in timed],
        "time_to_post_s": sum(r["ended"] - r["started"] for r in timed) / n,
        "calls": sum(len(run) for run in per_run) / n,
        "critical_path": sum(critical_path(run) for run in per_run) / n,
        "prompt_tokens": sum(c.prompt_tokens for run in per_run for c in run) / n,
        "completion_tokens": sum(c.completion_tokens for run in per_run for c in run) / n,
        "roles": {role: roles[role] / n for role in roles},
        "role_prompt": {role: role_prompt[role] / n for role in role_prompt},
    }


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


ROWS = (
    ("time to post, s", "time_to_post_s", "{:.2f}"),
    ("LLM calls per post", "calls", "{:.1f}"),
    ("calls on the critical path", "critical_path", "{:.1f}"),
    ("prompt tokens per post", "prompt_tokens", "{:.0f}"),
    ("completion tokens per post", "completion_tokens", "{:.0f}"),
)


def _print_table(title: str, sides: list[tuple[str, dict[str, Any]]]) -> None:
    print(f"\n== {title}")
    header = f"{'':44}" + "".join(f"{name:>16}" for name, _ in sides)
    pair = len(sides) == 2
    print(header + (f"{'new/ref':>10}" if pair else ""))

    def row(label: str, values: list[float], fmt: str) -> None:
        line = f"{label:44}" + "".join(f"{fmt.format(v):>16}" for v in values)
        if pair and values[0]:
            line += f"{values[1] / values[0]:>10.2f}"
        print(line)

    for label, key, fmt in ROWS:
        row(label, [s[key] for _, s in sides], fmt)
    roles = sorted({r for _, s in sides for r in s["roles"]})
    for role in roles:
        row(f"  {role} calls", [s["roles"].get(role, 0) for _, s in sides], "{:.1f}")
        row(f"  {role} prompt tok", [s["role_prompt"].get(role, 0) for _, s in sides], "{:.0f}")
    print("outcomes: " + "; ".join(f"{name} {s['outcomes']}" for name, s in sides))


def main() -> None:
    """Run the posts on one or both sides and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ref", help="also run this git revision's code, side by side")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per call (call)")
    parser.add_argument("--base", type=float, default=0.3, help="seconds per call (token)")
    parser.add_argument("--prefill", type=float, default=0.00025, help="s per prompt token")
    parser.add_argument("--per-token", type=float, default=0.02, help="s per completion token")
    parser.add_argument("--runs", type=int, default=1, help="timed runs per side and mode")
    parser.add_argument("--modes", nargs="+", default=["fast", "normal"])
    parser.add_argument("--settings", nargs="+", default=["call", "token"])
    parser.add_argument(
        "--supervisors", nargs="+", default=["plans", "one-step"], choices=["plans", "one-step"]
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--llm-url", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child, args.llm_url, args.data_dir, args.mode, args.runs)
        return

    sys.path.insert(0, str(REPO_ROOT))
    from tests.support.scripted_openai import ScriptedOpenAIServer

    settings = {
        "call": {"latency": args.latency},
        "token": {"latency": args.base, "prefill": args.prefill, "per_token": args.per_token},
    }
    recorder = Recorder()
    print(
        f"README request, one image; call: {args.latency} s per call; token: {args.base} s + "
        f"{args.prefill * 1000:g} ms/prompt token + {args.per_token * 1000:g} ms/completion "
        f"token; {args.runs} timed run(s) per cell; Python {sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory() as tmp, ScriptedOpenAIServer(recorder) as srv:
        roots: list[tuple[str, Path]] = []
        if args.ref:
            roots.append((f"ref {_export(args.ref, Path(tmp))}", Path(tmp) / "tree"))
        roots.append(("worktree", REPO_ROOT))
        for supervisor in args.supervisors:
            recorder.supervisor = supervisor
            for mode in args.modes:
                for name in args.settings:
                    setting = settings[name]
                    sides = [
                        (label, _run_side(root, recorder, srv.base_url, mode, setting, args.runs))
                        for label, root in roots
                    ]
                    _print_table(f"{supervisor} supervisor, {mode} mode, {name} latency", sides)


if __name__ == "__main__":
    main()
