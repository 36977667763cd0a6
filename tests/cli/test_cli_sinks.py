"""Credentials and peers' text in the CLI's error and warning lines: a password never shown (not even the part of
it libpq takes for a host name), a peer's error text on one bounded line without terminal escapes."""
from __future__ import annotations

import pytest

from indexer.cli import main

HOSTILE = "node said: \x1b[2J\x1b]0;pwned\x07\u202eevil\u200b\r\nerror: forged second line " + "z" * 100_000


@pytest.mark.parametrize("url", ["postgresql://u:p@ss@127.0.0.1:1/db", "postgres://u:pa@s@s@127.0.0.1:1/db"])
def test_an_unencoded_at_in_the_password_is_refused_without_showing_it(url, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INDEXER_HOME", str(tmp_path))
    assert main(["--database-url", url, "status"]) == 2
    err = capsys.readouterr().err
    assert "%40" in err and "ss@" not in err and "p@" not in err and len(err.splitlines()) == 1


def test_a_libpq_keyword_string_is_refused_without_showing_its_password(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INDEXER_HOME", str(tmp_path))
    monkeypatch.setenv("DATABASE_URL", "password=s3cr3t-value host=db user=x")
    assert main(["migrate"]) == 2
    err = capsys.readouterr().err
    assert "not a PostgreSQL URL" in err and "s3cr" not in err


def test_a_failure_with_a_peers_text_is_one_bounded_line(tmp_path, monkeypatch, capsys):
    from indexer.cli import commands

    def fails(args, settings):
        raise RuntimeError(f"fetch https://user:pa@ss@node.example/x failed: {HOSTILE} password=hunter2")

    monkeypatch.setenv("INDEXER_HOME", str(tmp_path))
    monkeypatch.setattr(commands, "cmd_status", fails)
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("error: RuntimeError: fetch https://***@node.example/x")
    for bad in ("\x1b", "\x07", "\r", "\u202e", "\u200b", "pa@ss", "hunter2"):
        assert bad not in err, repr(bad)
    assert "\\x1b[2J" in err and "\\u202e" in err and len(err) < 2_100
