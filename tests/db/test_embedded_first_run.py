"""Issue 35 items 1, 3 and 5, issue 37 item 7: the embedded server starts from a checkout no other user can enter
(root: cluster and binaries under /var/lib/devshard-indexer, nothing of the user's chmod-ed; another user: all under
its own INDEXER_HOME), the system user is created without PATH, the read-only login, and a stable port."""
from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from indexer.db import embedded_system as system
from indexer.db.embedded import EmbeddedCluster, EmbeddedError

ROOT = Path(__file__).resolve().parents[2]
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as a system user only when root starts it")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _cli(home: Path | None, *args, cwd: Path = ROOT, **env):
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "INDEXER_HOME")}
    if home is not None:
        base["INDEXER_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "indexer", *args], cwd=cwd, env=base | env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def private():
    """A directory like root's home or `mktemp -d`: 0700, so no other user can enter it."""
    path = Path(tempfile.mkdtemp(prefix="indexer-private-"))
    yield path
    EmbeddedCluster(path / "checkout" / ".indexer").destroy()
    shutil.rmtree(path, ignore_errors=True)


@as_root
def test_root_starts_a_checkout_in_a_private_directory_without_opening_it(private):
    home = private / "checkout" / ".indexer"
    res = _cli(home, "db", "url")
    assert res.returncode == 0, res.stderr
    with psycopg.connect(res.stdout.strip()) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("indexer",)
    assert _mode(private) == 0o700  # nothing of the user's was opened up
    cluster = EmbeddedCluster(home)
    assert cluster.data_dir.parent == system.SYSTEM_DIR / "clusters"
    assert (home / "cluster").read_text().strip() == str(cluster.data_dir)
    assert (cluster.data_dir / "pgdata" / "PG_VERSION").exists() and not (home / "pgdata").exists()
    owner = cluster.data_dir.stat()
    assert (owner.st_uid, _mode(cluster.data_dir)) == (system.server_ids()[0], 0o700)
    assert (home / "postgres.log").resolve() == cluster.log_file and _mode(cluster.log_file) == 0o600
    assert _mode(home / "password") == 0o600
    binaries = list((system.SYSTEM_DIR / "postgresql").glob("*/.complete"))
    assert binaries, "the server binaries are copied once under /var/lib"
    other = EmbeddedCluster(private / "clone2" / ".indexer")  # another clone: a cluster of its own
    assert other.data_dir != cluster.data_dir

    cluster.destroy()  # what the tests' session cluster does: nothing left under /var/lib
    assert not cluster.data_dir.exists() and not home.exists()


@as_root
def test_a_removed_home_takes_its_cluster_with_it(private, caplog):
    # a system directory of its own: another process starting a cluster in /var/lib meanwhile would remove the
    # orphan itself (test_a_cluster_whose_home_is_gone_is_removed_when_another_starts)
    system_dir = Path(tempfile.mkdtemp(prefix="indexer-system-"))
    system_dir.chmod(0o755)
    home = private / "checkout" / ".indexer"
    try:
        url = EmbeddedCluster(home, system_dir=system_dir).url()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE gone (x int)")
        data_dir = EmbeddedCluster(home, system_dir=system_dir).data_dir
        shutil.rmtree(home)  # `make clean`: the passwords are gone, so is the data (as pgdata/ under it would be)
        with caplog.at_level(logging.WARNING, logger="indexer.db.embedded"):
            fresh = EmbeddedCluster(home, system_dir=system_dir).url()
        assert f"removing the embedded cluster {data_dir}" in caplog.text
        with psycopg.connect(fresh) as conn:
            assert conn.execute("SELECT to_regclass('gone')").fetchone() == (None,)
    finally:
        EmbeddedCluster(home, system_dir=system_dir).destroy()
        shutil.rmtree(system_dir, ignore_errors=True)


@as_root
def test_an_older_root_cluster_under_indexer_home_stays_there(private):
    reachable = private / "reachable"
    reachable.mkdir(mode=0o755)
    home = reachable / ".indexer"
    legacy = EmbeddedCluster(home)  # as an older release laid it out: pgdata/ under INDEXER_HOME
    legacy.in_home, legacy.data_dir = True, home
    legacy.pgdata, legacy.log_file = home / "pgdata", home / "postgres.log"
    try:
        private.chmod(0o711)
        url = legacy.url()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
        legacy.stop()
        again = EmbeddedCluster(home)
        assert again.in_home and again.pgdata == home / "pgdata"
        with psycopg.connect(again.url()) as conn:
            assert conn.execute("SELECT to_regclass('kept') IS NOT NULL").fetchone() == (True,)
        again.stop()
        private.chmod(0o700)  # the server user cannot reach it any more: an error naming the directory
        with pytest.raises(EmbeddedError, match=f"{private} is not searchable"):
            EmbeddedCluster(home).url()
        assert _mode(private) == 0o700
    finally:
        private.chmod(0o711)
        legacy.destroy()


@as_root
def test_a_fresh_system_dir_is_laid_out_under_a_strict_umask(private):
    """Binaries copied and directories made under umask 077 are still readable by the server user."""
    private.chmod(0o711)  # the system dir's parent must be reachable, as /var/lib is
    system_dir = private / "devshard"
    cluster = EmbeddedCluster(private / "checkout" / ".indexer", system_dir=system_dir)
    before = os.umask(0o077)
    try:
        url = cluster.url()
    finally:
        os.umask(before)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    copies = list((system_dir / "postgresql").iterdir())
    assert len(copies) == 1 and (copies[0] / ".complete").exists()
    assert all(_mode(p) & 0o005 == 0o005 for p in copies[0].rglob("*") if p.is_dir() and not p.is_symlink())
    assert _mode(system_dir) == 0o755 and _mode(system_dir / "clusters") == 0o711
    assert cluster.data_dir.parent == system_dir / "clusters"
    cluster.destroy()
    assert not cluster.data_dir.exists()


@as_root
def test_a_system_dir_the_server_user_cannot_reach_is_an_error(private):
    with pytest.raises(EmbeddedError, match=f"cannot reach .*{private} is not searchable"):
        EmbeddedCluster(private / "home", system_dir=private / "var" / "devshard").url()


@as_root
def test_the_system_user_is_created_without_usr_sbin_on_path(monkeypatch):
    import pwd

    user = f"idxt{secrets.token_hex(4)}"
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        uid, gid = system.server_ids(user)
        assert pwd.getpwnam(user).pw_uid == uid and uid != 0
    finally:
        subprocess.run(["/usr/sbin/userdel", user], capture_output=True)
    monkeypatch.setattr(system, "USERADD", ("/nonexistent/useradd",))
    monkeypatch.setattr(system, "ADDUSER", ("/nonexistent/adduser",))
    with pytest.raises(EmbeddedError, match="neither useradd nor adduser exists .*/nonexistent/useradd"):
        system.server_ids(user)


@as_root
def test_first_runs_at_once_share_the_system_user_they_create():
    import pwd

    user = f"idxc{secrets.token_hex(4)}"
    # each process imports, says so, and waits for the word to look the user up: the lookups start together
    code = ("import sys; from indexer.db.embedded_system import server_ids; print('ready', flush=True); "
            f"sys.stdin.readline(); print(*server_ids({user!r}))")
    try:
        runs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(6)]
        assert [run.stdout.readline() for run in runs] == ["ready\n"] * len(runs)
        for run in runs:
            run.stdin.write("go\n")
            run.stdin.flush()
        results = [run.communicate(timeout=120) + (run.returncode,) for run in runs]
        assert all(rc == 0 for _, _, rc in results), [err for _, err, _ in results]
        entry = pwd.getpwnam(user)
        assert {out.strip() for out, _, _ in results} == {f"{entry.pw_uid} {entry.pw_gid}"}
    finally:
        subprocess.run(["/usr/sbin/userdel", user], capture_output=True)


@as_root
def test_a_failing_useradd_is_a_clear_error():
    with pytest.raises(EmbeddedError, match="creating the system user 'no such user!' .* failed"):
        system.server_ids("no such user!")


def _runnable_as(uid: int, gid: int, home: Path) -> list[str] | None:
    """A python that user can run with this checkout's packages: this one, or Debian's with our site-packages."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"PYTHONPATH": f"{ROOT}:{site}"}
    for python in (sys.executable, "/usr/bin/python3.11"):
        try:
            probe = subprocess.run([python, "-c", "import indexer.db.embedded, psycopg"], user=uid, group=gid,
                                   extra_groups=[], cwd=home, env=env, capture_output=True)
        except OSError:  # e.g. a pyenv interpreter under root's 0700 home
            continue
        if probe.returncode == 0:
            return [python]
    return None


@as_root
def test_another_user_starts_its_checkout_in_its_private_home():
    import pwd

    user = f"idxu{secrets.token_hex(4)}"
    made = subprocess.run(["/usr/sbin/useradd", "-M", "-s", "/usr/sbin/nologin", user], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot create a throwaway user: {made.stderr.strip()}")
    entry = pwd.getpwnam(user)
    home = Path(tempfile.mkdtemp(prefix="indexer-user-"))  # 0700, given to the user: its private home
    os.chown(home, entry.pw_uid, entry.pw_gid)
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}:{site}"}
    try:
        python = _runnable_as(entry.pw_uid, entry.pw_gid, home)
        if python is None:
            pytest.skip("no python this user can run with the checkout's packages")

        def as_user(*args):
            return subprocess.run([*python, "-m", "indexer", *args], user=entry.pw_uid, group=entry.pw_gid,
                                  extra_groups=[], cwd=home, env=env, capture_output=True, text=True, timeout=300)

        res = as_user("db", "url")
        assert res.returncode == 0, res.stderr
        with psycopg.connect(res.stdout.strip()) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
        assert (home / ".indexer" / "pgdata" / "PG_VERSION").exists()  # a user's layout: all under INDEXER_HOME
        assert (home / ".indexer" / "pgdata").stat().st_uid == entry.pw_uid
        assert _mode(home) == 0o700
        stopped = as_user("db", "stop")
        assert stopped.returncode == 0, stopped.stderr
    finally:
        pgdata = home / ".indexer" / "pgdata"
        if (pgdata / "postmaster.pid").exists():  # a failed assertion above left the server running: fast stop
            os.kill(int((pgdata / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
        subprocess.run(["/usr/sbin/userdel", user], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def home():
    path = Path(tempfile.mkdtemp(prefix="indexer-emb-"))
    yield path
    EmbeddedCluster(path).destroy()


def test_the_reader_login_reads_api_and_nothing_else(home):
    res = _cli(home, "db", "url", "--reader")
    assert res.returncode == 0, res.stderr
    url = res.stdout.strip()
    assert urlsplit(url).username == "indexer_reader"
    assert urlsplit(url).password == (home / "reader-password").read_text().strip()
    assert _mode(home / "reader-password") == 0o600
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM api.epochs").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM rec.source")
        conn.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE api.mine (x int)")
    again = _cli(home, "db", "url", "--reader")  # the password is kept, not regenerated
    assert again.returncode == 0 and again.stdout.strip() == url


def test_reader_needs_the_embedded_server(home):
    res = _cli(home, "db", "url", "--reader", DATABASE_URL="postgresql://u:p@127.0.0.1:1/x")
    assert res.returncode == 2
    assert "--reader goes with `db url` on the embedded server" in res.stderr
    assert _cli(home, "db", "stop", "--reader").returncode == 2


def test_the_port_survives_a_stop_and_moves_only_when_taken(home, caplog):
    cluster = EmbeddedCluster(home)
    first = urlsplit(cluster.url()).port
    assert cluster.stop()
    res = _cli(home, "db", "url")  # what a user runs after `indexer db stop`
    assert res.returncode == 0, res.stderr
    assert urlsplit(res.stdout.strip()).port == first and "taken" not in res.stderr
    assert cluster.stop()
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the server's closed connections linger
        squatter.bind(("127.0.0.1", first))
        squatter.listen()
        with caplog.at_level(logging.WARNING, logger="indexer.db.embedded"):
            moved = urlsplit(cluster.url()).port
    assert moved != first
    assert f"port {first} (where it ran before) is taken" in caplog.text and f"on port {moved} instead" in caplog.text
    assert int((home / "port").read_text()) == moved


@as_root
def test_a_cluster_whose_home_is_gone_is_removed_when_another_starts(private):
    """A test's temporary home or a removed clone leaves its cluster under SYSTEM_DIR, maybe still running: the next
    cluster to start there stops and removes it (nobody can log in to it: its passwords went with the home). A
    cluster whose home still exists, and a directory another process is still laying out, stay."""
    system_dir = Path(tempfile.mkdtemp(prefix="indexer-system-"))
    system_dir.chmod(0o755)  # reachable by the server user, as /var/lib/devshard-indexer is
    gone, kept, fresh = (EmbeddedCluster(private / name / ".indexer", system_dir=system_dir)
                         for name in ("gone", "kept", "fresh"))
    try:
        gone_url, kept_url = gone.url(), kept.url()
        laying_out = system_dir / "clusters" / "0123456789abcdef"  # no `home` file yet
        laying_out.mkdir()
        shutil.rmtree(private / "gone")  # its server still runs
        fresh.url()
        assert not gone.data_dir.exists() and laying_out.exists() and kept.data_dir.exists()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(gone_url, connect_timeout=3)
        with psycopg.connect(kept_url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        for cluster in (gone, kept, fresh):
            cluster.destroy()
        shutil.rmtree(system_dir, ignore_errors=True)
