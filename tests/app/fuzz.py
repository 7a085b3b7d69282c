"""Fuzz a real Atelier server with schemathesis: `python -m tests.app.fuzz`.

Starts the scripted OpenAI-compatible model on 127.0.0.1, then the service in a
child process (`tests.app.serve`, real uvicorn, real SQLite) open (no
AUTH_API_KEYS) or keyed (the key sent on every request), and runs the schemathesis
CLI against its `/openapi.json`. The checks are the contract of issue 11: no 5xx
(`not_a_server_error`), every status documented (`status_code_conformance`),
bodies and content types as documented (`response_schema_conformance`,
`content_type_conformance`), and 405s with an `Allow` header naming what the
path serves (`unsupported_method`).

CI runs it through tests/app/test_fuzz.py with few examples; the acceptance run is

    PYTHONPATH=. .venv/bin/python -m tests.app.fuzz --examples 30 \\
        --phases examples,coverage,fuzzing,stateful --auth both

and prints schemathesis's summary per mode. The exit status is 0 only when every
mode passed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.app.harness import ServerProcess
from tests.app.sample_graphs import scripted_reply
from tests.support.scripted_openai import ScriptedOpenAIServer

API_KEY = "fuzz-key-0123456789abcdef"
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "unsupported_method",
)
ALL_PHASES = "examples,coverage,fuzzing,stateful"
#: What app/security.py logs for an exception no handler caught (answered 500).
UNHANDLED = "unhandled error"


@dataclass
class FuzzResult:
    """What one schemathesis run against one server found."""

    mode: str
    returncode: int
    output: str
    server_log: str


def schemathesis_cli() -> str:
    """Return the schemathesis CLI: `$ATELIER_ST`, the fuzz venv `./dev test` makes, or PATH.

    schemathesis lives in its own venv (`$VENV/fuzz`, from tests/fuzz-requirements.txt)
    because it needs a jsonschema-rs newer than langgraph-api allows; it only talks
    HTTP to the server under test, so nothing of Atelier needs to import it.
    """
    if os.environ.get("ATELIER_ST"):
        return os.environ["ATELIER_ST"]
    venv = Path(sys.executable).parent.parent
    for candidate in (venv / "fuzz" / "bin" / "st", Path(sys.executable).with_name("st")):
        if candidate.exists():
            return str(candidate)
    return shutil.which("st") or "st"


def schemathesis_command(
    url: str, *, examples: int, phases: str, seed: int, key: str | None, report_dir: Path
) -> list[str]:
    """Return the `st run` command line for a server at `url`."""
    command = [
        schemathesis_cli(),
        "run",
        f"{url}/openapi.json",
        "--checks",
        ",".join(CHECKS),
        "--phases",
        phases,
        "--max-examples",
        str(examples),
        "--seed",
        str(seed),
        "--workers",
        "1",
        "--request-timeout",
        "60",
        "--no-color",
        "--report",
        "junit",
        "--report-dir",
        str(report_dir),
        # Run creations stream or wait until the run ends; the scripted model answers
        # at once, so a run ends in well under a second.
        "--suppress-health-check",
        "too_slow,filter_too_much",
    ]
    if key is not None:
        command += ["--header", f"Authorization: Bearer {key}"]
    return command


def fuzz(
    *,
    keyed: bool,
    examples: int,
    phases: str,
    seed: int = 11,
    workdir: Path | None = None,
    timeout: float = 1200,
) -> FuzzResult:
    """Serve the app (open or keyed) with the scripted model and fuzz it once."""
    mode = "keyed" if keyed else "open"
    with tempfile.TemporaryDirectory(prefix=f"atelier-fuzz-{mode}-") as tmp:
        base = workdir or Path(tmp)
        data_dir = base / mode
        data_dir.mkdir(parents=True, exist_ok=True)
        llm = ScriptedOpenAIServer(scripted_reply).start()
        server = ServerProcess(
            data_dir,
            llm.base_url,
            graphs="sample",
            env={"AUTH_API_KEYS": API_KEY if keyed else "", "RUN_TIMEOUT": "30"},
        )
        try:
            server.start()
            command = schemathesis_command(
                server.url,
                examples=examples,
                phases=phases,
                seed=seed,
                key=API_KEY if keyed else None,
                report_dir=data_dir / "schemathesis-report",
            )
            env = {**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1"}
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                cwd=data_dir,  # schemathesis keeps its example database in the cwd
                check=False,
            )
            output = done.stdout + done.stderr
            returncode = done.returncode
        finally:
            server.stop()
            llm.stop()
        return FuzzResult(mode, returncode, output, server.log_path.read_text(errors="replace"))


def main(argv: list[str] | None = None) -> int:
    """Fuzz open and/or keyed servers; print each summary; 0 when all passed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=30, help="max examples per operation")
    parser.add_argument("--phases", default=ALL_PHASES)
    parser.add_argument("--auth", choices=("open", "keyed", "both"), default="both")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    modes = {"open": [False], "keyed": [True], "both": [False, True]}[args.auth]
    failed = False
    for keyed in modes:
        result = fuzz(keyed=keyed, examples=args.examples, phases=args.phases, seed=args.seed)
        print(f"===== {result.mode} server: schemathesis exit {result.returncode}")
        print(result.output)
        if UNHANDLED in result.server_log:
            print(f"===== {result.mode} server logged an unhandled error (a 500)")
            failed = True
        failed = failed or result.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
