"""A throwaway PostgreSQL server for the tests, started from the distribution's binaries.

One server per test session: `initdb` in a temporary folder, then `postgres` on a
free loopback port with its unix socket in that folder, trust authentication and
no fsync (the data is thrown away). The server refuses to run as root, so under
root it runs as the `postgres` system user, which owns the folder. Each test gets
a database of its own (`create_database`), which costs one `CREATE DATABASE`, and
drops it when it ends (`drop_database`).

The server's environment is cleaned of libfaketime: the tests pass every time
they store explicitly, and the server itself needs no moved clock.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

START_TIMEOUT_S = 60  # seconds for initdb plus server start on a loaded machine
SUPERUSER = "postgres"
SYSTEM_USER = "postgres"  # who runs the server when the tests run as root
PASSWORD_ROLE = "secured"
"""The one role that must give a password (scram-sha-256); every other role is trusted."""


class PgUnavailableError(Exception):
    """No PostgreSQL server can be started here; the message says why."""


def find_bindir() -> Path:
    """The folder of `pg_ctl` and `initdb`: PATH first, then the newest Debian-style install.

    Raises:
        PgUnavailableError: no server binaries are installed.
    """
    on_path = shutil.which("pg_ctl")
    if on_path is not None and shutil.which("initdb") is not None:
        return Path(on_path).resolve().parent
    installed = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if installed:
        return Path(installed[-1]).parent
    raise PgUnavailableError("no PostgreSQL server binaries (pg_ctl, initdb); install `postgresql`")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _clean_env() -> dict[str, str]:
    drop = ("LD_PRELOAD", "FAKETIME", "PG")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)} | {"LC_ALL": "C.UTF-8"}


class PgServer:
    """A running PostgreSQL server in its own folder; `stop` removes the folder too."""

    def __init__(self, bindir: Path) -> None:
        """Remember the binaries; nothing starts until `start`."""
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="backthink-pg-"))
        self.data = self.root / "data"
        self.port = 0
        self._as: list[str] = []
        self._names = itertools.count(1)
        self._running = False

    def _run(self, *args: str) -> None:
        proc = subprocess.run(
            [*self._as, *args],
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            raise PgUnavailableError(
                f"{Path(args[0]).name} failed: {(proc.stderr or proc.stdout).strip()}"
            )

    def start(self) -> None:
        """Initialise the cluster (UTF-8, C.UTF-8 collation) and start the server.

        C.UTF-8 rather than C: pg_trgm sees CJK characters only under a UTF-8 ctype.

        Raises:
            PgUnavailableError: the server could not be started (the reason is its error).
        """
        if os.geteuid() == 0:
            try:
                shutil.chown(self.root, user=SYSTEM_USER)
            except (LookupError, OSError) as exc:
                raise PgUnavailableError(
                    f"running as root needs a {SYSTEM_USER!r} user: {exc}"
                ) from None
            self._as = ["runuser", "-u", SYSTEM_USER, "--"]
        self._run(
            str(self.bindir / "initdb"),
            "-D", str(self.data),
            "-A", "trust",
            "-U", SUPERUSER,
            "-E", "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )  # fmt: skip
        # Only PASSWORD_ROLE is asked for a password, so a test can fail authentication.
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\n"
            f"host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n"
            "host all all 127.0.0.1/32 trust\n",
            encoding="utf-8",
        )
        options = " ".join(
            [
                "-c listen_addresses=127.0.0.1",
                f"-k {self.root}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=200",
            ]
        )
        for _ in range(3):  # the free port may be taken between the probe and the start
            self.port = _free_port()
            try:
                self._run(
                    str(self.bindir / "pg_ctl"),
                    "-D", str(self.data),
                    "-o", f"-p {self.port} {options}",
                    "-l", str(self.root / "server.log"),
                    "-w", "-t", str(START_TIMEOUT_S),
                    "start",
                )  # fmt: skip
            except PgUnavailableError:
                continue
            self._running = True
            return
        log = (self.root / "server.log").read_text(errors="replace")[-2000:]
        raise PgUnavailableError(f"the PostgreSQL server did not start: {log.strip()}")

    def url(self, database: str = "postgres", *, driver: str = "psycopg") -> str:
        """An SQLAlchemy URL for a database on this server, as the superuser."""
        return f"postgresql+{driver}://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> None:
        """Run one statement outside a transaction (CREATE DATABASE needs that)."""
        import psycopg

        conninfo = f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={database}"
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]  # the tests' own fixed statements

    def create_database(self) -> str:
        """Create an empty database and return its name.

        FILE_COPY copies template0's files instead of writing each page to the WAL
        too: half the time, and half the data written.
        """
        name = f"t{next(self._names)}"
        self.execute(f"CREATE DATABASE {name} TEMPLATE template0 STRATEGY FILE_COPY")
        return name

    def drop_database(self, name: str) -> None:
        """Drop a database, closing whatever connections a test left open to it.

        Dropped while its files are still in the page cache, a database is never
        written to the disk; kept to the end, the suite's few gigabytes of them are,
        and removing them then waits for that writeback.
        """
        self.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server at once (no checkpoint: the data is thrown away) and remove it."""
        if self._running:
            with contextlib.suppress(PgUnavailableError, subprocess.TimeoutExpired):
                self._run(
                    str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"
                )
            self._running = False
        shutil.rmtree(self.root, ignore_errors=True)


def start_server() -> PgServer:
    """A started server; the caller stops it (`stop`).

    Raises:
        PgUnavailableError: no server can be started here (nothing is left behind).
    """
    server = PgServer(find_bindir())
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    return server
