"""Issue 35 item 2: the bench's tar extraction is safe on every Python 3.11 release, with or without tarfile's
`filter=` argument (3.11.4+): only plain files and directories inside the destination are written."""
from __future__ import annotations

import importlib.util
import io
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("refusal_bench", ROOT / "bench" / "refusal_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _archive(*members: tuple[str, bytes | None, bytes]) -> tarfile.TarFile:
    """(name, type, content) members; type None is a regular file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind is None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type, info.linkname = kind, data.decode()
                tar.addfile(info)
    buf.seek(0)
    return tarfile.open(fileobj=buf)


@pytest.fixture(params=["with filter", "without filter"])
def bench(request, monkeypatch):
    if request.param == "without filter":  # as on Python 3.11.0-3.11.3
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return _bench()


def test_plain_files_and_directories_are_extracted(bench, tmp_path):
    tar = _archive(("indexer", tarfile.DIRTYPE, b""), ("indexer/a.py", None, b"x = 1\n"))
    bench.extract_tree(tar, tmp_path)
    assert (tmp_path / "indexer" / "a.py").read_text() == "x = 1\n"


@pytest.mark.parametrize("member, reason", [
    (("../escape.py", None, b"x"), "would be written outside"),
    (("/tmp/absolute.py", None, b"x"), "would be written outside"),
    (("indexer/../../escape.py", None, b"x"), "would be written outside"),
    (("indexer/link", tarfile.SYMTYPE, b"/etc/passwd"), "is not a regular file or directory"),
    (("indexer/hard", tarfile.LNKTYPE, b"indexer/a.py"), "is not a regular file or directory"),
    (("indexer/dev", tarfile.CHRTYPE, b""), "is not a regular file or directory"),
])
def test_anything_else_is_refused_before_a_byte_is_written(bench, tmp_path, member, reason):
    tar = _archive(("indexer/a.py", None, b"x"), member)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(ValueError, match=f"member {member[0]!r} {reason}"):
        bench.extract_tree(tar, dest)
    assert list(dest.iterdir()) == [] and not (tmp_path / "escape.py").exists()
