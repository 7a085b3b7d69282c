"""Throwaway PostgreSQL, Redis and nginx servers for the tests of the scale-out backend.

Nothing here is a mock: `PostgresCluster` runs Debian's (or any) PostgreSQL binaries on
a fresh data directory, `RedisServer` runs `redis-server`, both on a free loopback port,
with durability switched off (these servers live for one test session), and
`NginxProxy` runs `nginx` in front of API replicas:

- PostgreSQL: `initdb` and `pg_ctl` refuse to run as root, so as root they run as the
  `postgres` user (`runuser -u postgres --`) on a temporary directory it owns; the
  socket goes to that directory too, never to /var/run. `fsync`, `synchronous_commit`
  and `full_page_writes` are off (`durable_commits=True` keeps `synchronous_commit` on,
  for tests that crash the server); authentication is `trust` on loopback only. `halt`
  and `resume` stop the server and start it again on the same port and data.
- Redis: `redis-server --port N --save "" --appendonly no`, restartable on the same port
  (for the tests that drop Redis mid-stream).
- nginx: the shipped `deploy/nginx.conf` with only its upstream servers and its listen
  port replaced (`proxy_config`), in the foreground (`daemon off`) with its pid, logs and
  temporary files in a directory of its own, so the tests also check the proxy's options
  (unbuffered SSE, HTTP/1.1 upstreams) on the way.

The pytest fixtures (`postgres_cluster`, `postgres_url`, `migrated_postgres_url`,
`redis_server`) are imported by the `conftest.py` of the test directories that need them
(tests/app/db, tests/knowledge, tests/providers), so
no other test starts a server. Servers are shared by the whole session, started on first
use and stopped at its end. When the binaries (or the `scale` extra's psycopg) are
missing the tests skip with the reason — except under `CI=true`, where they fail:
`.ci/run` installs `postgresql`, `redis-server` and `nginx`, so a missing one there is
a broken set-up, not a reason to skip (`nginx_or_missing`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Seconds a server gets to accept connections after it was started.
START_TIMEOUT = 60.0


def missing(reason: str) -> None:
    """Skip the test for a missing server or library, or fail it under CI."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: .ci/run must install it)", pytrace=False)
    pytest.skip(reason)


def unless_scale_installed() -> list[str]:
    """Return a conftest's `collect_ignore_glob` for modules that import the `scale` extra.

    Without psycopg, psycopg_pool and redis those modules are not collected (a machine
    set up without the extra skips them), except under `CI=true`, where `./dev test`
    installs the extra and an import error must fail.
    """
    import importlib.util

    installed = all(importlib.util.find_spec(name) for name in ("psycopg", "psycopg_pool", "redis"))
    ci = os.environ.get("CI", "").lower() == "true"
    return [] if installed or ci else ["test_*.py"]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, timeout: float, process: subprocess.Popen[bytes] | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


# -- PostgreSQL --------------------------------------------------------------------


def postgres_bindir() -> Path | None:
    """Return the directory of `initdb` and `pg_ctl`: on PATH, else Debian's newest."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    candidates = glob.glob("/usr/lib/postgresql/*/bin/initdb")

    def version(path: str) -> int:
        match = re.search(r"/postgresql/(\d+)/", path)
        return int(match.group(1)) if match else 0

    for initdb in sorted(candidates, key=version, reverse=True):
        bindir = Path(initdb).parent
        if (bindir / "pg_ctl").exists():
            return bindir
    return None


class PostgresCluster:
    """A PostgreSQL cluster in a temporary directory, listening on a loopback port."""

    def __init__(self, bindir: Path, *, durable_commits: bool = False) -> None:
        """Prepare a cluster from the binaries in `bindir`; `start()` creates and starts it.

        Args:
            bindir: Where `initdb` and `pg_ctl` are.
            durable_commits: Keep `synchronous_commit` on, so a commit survives the
                server crashing (`halt("immediate")`): without it the last commits
                before a crash may be lost, which no deployment should run with.
        """
        self.bindir = bindir
        self.durable_commits = durable_commits
        self.port = 0
        self.root: Path | None = None
        self._as_postgres = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._as_postgres:  # initdb and pg_ctl refuse root
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT)
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({result.returncode}): {result.stderr[-2000:]}")

    @property
    def data(self) -> Path:
        """The data directory."""
        assert self.root is not None, "the cluster is not started"
        return self.root / "data"

    def start(self) -> None:
        """Create the cluster (initdb) and start it; raise when it does not come up."""
        self.root = Path(tempfile.mkdtemp(prefix="atelier-pg-"))
        if self._as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self.port = free_port()
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions",
        )  # fmt: skip
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "fsync": "off",
            "synchronous_commit": "on" if self.durable_commits else "off",
            "full_page_writes": "off",
            "max_connections": "200",
            "shared_buffers": "64MB",
        }
        # Appended as root to a file postgres owns: the owner does not change.
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        log = self.root / "postgres.log"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(log), "-w", "-t", "60", "start")
        _wait_for_port(self.port, START_TIMEOUT, None)

    def halt(self, mode: str = "fast") -> None:
        """Stop the server (`pg_ctl stop -m MODE`: smart, fast or immediate), keeping its data.

        `fast` ends every session (clients get an error at once) and shuts down
        cleanly; `immediate` is a crash (recovery from the WAL at the next start).
        """
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def resume(self) -> None:
        """Start a server stopped by `halt` again, on the same port and data directory."""
        assert self.root is not None, "the cluster was deleted"
        log = self.root / "postgres.log"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(log), "-w", "-t", "60", "start")
        _wait_for_port(self.port, START_TIMEOUT, None)

    def stop(self) -> None:
        """Stop the cluster at once and delete its directory; idempotent."""
        if self.root is None:
            return
        with contextlib.suppress(Exception):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def url(self, database: str = "postgres") -> str:
        """Return the connection URL of one database of the cluster."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, template: str | None = None) -> str:
        """Create a database with a unique name (a copy of `template`, or empty); return its URL."""
        import psycopg

        name = f"test_{uuid.uuid4().hex[:12]}"
        copy = f' TEMPLATE "{template}"' if template else ""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{copy}')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database made by `create_database`, closing its connections."""
        import psycopg

        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- Redis -------------------------------------------------------------------------


class RedisServer:
    """A `redis-server` without persistence on a loopback port, restartable on that port."""

    def __init__(self, binary: str) -> None:
        """Prepare a server run from `binary`; `start()` starts it."""
        self.binary = binary
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The `redis://` URL of the server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server on its port and wait until it accepts connections."""
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no"]  # nothing written to disk
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for_port(self.port, START_TIMEOUT, self.process)

    def stop(self) -> None:
        """Kill the server (as a crash would) and reap it; idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)

    def restart(self, down_for: float = 0.0) -> None:
        """Kill the server, stay down for `down_for` seconds, and start it on the same port."""
        self.stop()
        time.sleep(down_for)
        self.start()


# -- nginx -------------------------------------------------------------------------

#: The proxy configuration the deployment ships (docker-compose.yml mounts it).
SHIPPED_NGINX_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"


def nginx_binary() -> str | None:
    """Return the `nginx` executable: on PATH, else Debian's /usr/sbin/nginx."""
    found = shutil.which("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None


def nginx_or_missing() -> str:
    """Return the `nginx` executable, or skip the test (fail it under CI) without one."""
    binary = nginx_binary()
    if binary is None:
        missing("nginx is not installed (Debian package `nginx`)")
    assert binary is not None
    return binary


def proxy_config(template: str, upstreams: list[int], port: int, root: Path) -> str:
    """Return `template` (the shipped nginx.conf) proxying 127.0.0.1:`port` to `upstreams`.

    Only the `server` lines of the `upstream` block and the `listen` port change; the
    proxy options stay as shipped. Around them come what a throwaway server needs: the
    foreground, and its pid, logs and temporary files under `root`. A template whose
    shape changed (no upstream block, several listens) raises rather than being half
    replaced.
    """
    upstream = re.compile(r"(upstream\s+\w+\s*\{)([^}]*)(\})")
    blocks = upstream.findall(template)
    if len(blocks) != 1 or not re.search(r"^\s*server\s+\S+;\s*$", blocks[0][1], re.M):
        raise ValueError("the nginx config must have one upstream block of `server` lines")
    servers = "".join(f"\n        server 127.0.0.1:{p};" for p in upstreams)
    config = upstream.sub(lambda m: f"{m.group(1)}{servers}\n    {m.group(3)}", template)
    config, listens = re.subn(
        r"^(\s*)listen\s+[^;]+;", rf"\g<1>listen 127.0.0.1:{port};", config, flags=re.M
    )
    if listens != 1:
        raise ValueError(f"the nginx config must have one `listen` line, not {listens}")
    main = [
        "daemon off;",
        f"pid {root / 'nginx.pid'};",
        f"error_log {root / 'error.log'} info;",
    ]
    if os.geteuid() == 0:  # workers would run as `nobody`, unable to use `root`
        main.append("user root;")
    temp = [
        "log_format upstreams '$upstream_addr $request_method $uri $status';",
        f"access_log {root / 'access.log'} upstreams;",
    ] + [
        f"{kind}_temp_path {root / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    ]
    config, https = re.subn(
        r"^http\s*\{", "http {\n" + "".join(f"    {line}\n" for line in temp), config, flags=re.M
    )
    if https != 1:
        raise ValueError("the nginx config must have one `http` block")
    return "\n".join(main) + "\n" + config


class NginxProxy:
    """`nginx` on a loopback port with the shipped config, in front of `upstreams`."""

    def __init__(
        self, binary: str, upstreams: list[int], template: Path = SHIPPED_NGINX_CONF
    ) -> None:
        """Prepare a proxy to the API replicas on the loopback ports `upstreams`."""
        self.binary = binary
        self.upstreams = upstreams
        self.template = template
        self.port = free_port()
        self.root: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The proxy's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> NginxProxy:
        """Write the config, check it (`nginx -t`), start nginx and wait for its port."""
        self.root = Path(tempfile.mkdtemp(prefix="atelier-nginx-"))
        conf = self.root / "nginx.conf"
        text = self.template.read_text(encoding="utf-8")
        conf.write_text(proxy_config(text, self.upstreams, self.port, self.root), encoding="utf-8")
        command = [
            self.binary,
            "-p",
            str(self.root),
            "-c",
            str(conf),
            "-e",
            str(self.root / "error.log"),
        ]
        checked = subprocess.run([*command, "-t", "-q"], capture_output=True, text=True, timeout=30)
        if checked.returncode != 0:
            raise RuntimeError(f"nginx refused its config: {checked.stderr[-2000:]}")
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _wait_for_port(self.port, START_TIMEOUT, self.process)
        except (RuntimeError, TimeoutError) as exc:
            raise RuntimeError(f"{exc}: {self.error_log()}") from exc
        return self

    def served(self) -> dict[int, int]:
        """Return how many requests each upstream port answered so far (its access log)."""
        counts = dict.fromkeys(self.upstreams, 0)
        log = self.root / "access.log" if self.root is not None else None
        if log is None or not log.exists():
            return counts
        for line in log.read_text(errors="replace").splitlines():
            # `$upstream_addr` lists every upstream a request tried ("a:1, b:2").
            for address in line.rsplit(" ", 3)[0].split(","):
                port = address.rpartition(":")[2]
                if port.isdigit() and int(port) in counts:
                    counts[int(port)] += 1
        return counts

    def error_log(self, chars: int = 3000) -> str:
        """The end of nginx's error log."""
        if self.root is None or not (self.root / "error.log").exists():
            return ""
        return (self.root / "error.log").read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """Stop nginx at once (SIGTERM, its fast shutdown) and delete its directory."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


# -- pytest fixtures ---------------------------------------------------------------

# One server of each kind per test session, however many conftest modules import the
# fixtures below (each import is a fixture definition of its own to pytest).
_shared: dict[str, PostgresCluster | RedisServer | str] = {}


def _psycopg_or_missing() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        missing("psycopg is not installed (install the `scale` extra: pip install -e '.[scale]')")


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """Yield the session's throwaway PostgreSQL cluster (started on first use)."""
    _psycopg_or_missing()
    cluster = _shared.get("postgres")
    if cluster is None:
        bindir = postgres_bindir()
        if bindir is None:
            missing("PostgreSQL is not installed (initdb not on PATH nor in /usr/lib/postgresql)")
        if os.geteuid() == 0 and not _user_exists("postgres"):
            missing("running as root and there is no `postgres` user to run initdb as")
        assert bindir is not None
        cluster = PostgresCluster(bindir)
        cluster.start()
        _shared["postgres"] = cluster
    assert isinstance(cluster, PostgresCluster)
    yield cluster
    _shared.pop("postgres", None)
    _shared.pop("template", None)
    cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """Yield the URL of a fresh, empty database, dropped after the test."""
    url = postgres_cluster.create_database()
    yield url
    postgres_cluster.drop_database(url)


@pytest.fixture
def migrated_postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """Yield the URL of a fresh database at the newest schema (`atelier db upgrade`).

    The schema is applied once per session to a template database; each test gets a
    copy of it (`CREATE DATABASE ... TEMPLATE`), which takes milliseconds.
    """
    template = _shared.get("template")
    if template is None:
        from engine.postgres.migrations import upgrade_url

        url = postgres_cluster.create_database()
        # In a thread of its own: this fixture may be set up while an event loop runs.
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            executor.submit(asyncio.run, upgrade_url(url)).result()
        template = _shared["template"] = url.rsplit("/", 1)[1]
    assert isinstance(template, str)
    url = postgres_cluster.create_database(template=template)
    yield url
    postgres_cluster.drop_database(url)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """Yield the session's throwaway Redis server (started on first use)."""
    server = _shared.get("redis")
    if server is None:
        binary = shutil.which("redis-server")
        if binary is None:
            missing("redis-server is not installed")
        assert binary is not None
        server = RedisServer(binary)
        server.start()
        _shared["redis"] = server
    assert isinstance(server, RedisServer)
    yield server
    _shared.pop("redis", None)
    server.stop()


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
