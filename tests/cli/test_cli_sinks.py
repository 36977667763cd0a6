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


@pytest.mark.parametrize("url, reason", [("postgresql://u:pw-s3cret@[::1/db", "IPv6 host"),
                                         ("postgresql://u:pw%zzs3cret@h/db", "percent-encoded"),
                                         ("postgres://u:pw-s3cret@h/db?sslmode", "query parameter"),
                                         ("postgresql://u:pw-s3cret@h:abc/db", "port"),
                                         ("postgresql://u:pw-s3cret@127.0.0.1:99999/db", "port"),
                                         ("postgresql://u:pw-s3cret/db", "port")])  # the "@" forgotten
@pytest.mark.parametrize("via", ["DATABASE_URL", "--database-url"])
def test_a_url_libpq_cannot_parse_is_a_configuration_error_naming_the_variable(url, reason, via, tmp_path,
                                                                               monkeypatch, capsys):
    """Found at connect time it was a runtime failure (exit 1, "ProgrammingError: ..."); it is the user's setting."""
    monkeypatch.setenv("INDEXER_HOME", str(tmp_path))
    monkeypatch.delenv("DATABASE_URL", raising=False)
    if via == "DATABASE_URL":
        monkeypatch.setenv("DATABASE_URL", url)
    assert main(["--database-url", url, "status"] if via != "DATABASE_URL" else ["status"]) == 2
    err = capsys.readouterr().err
    assert f"{via} cannot be parsed as a PostgreSQL URL" in err and reason in err, err
    assert "s3cret" not in err and len(err.splitlines()) == 1
    assert not (tmp_path / "pgdata").exists()  # the embedded cluster was not started instead


def test_libpqs_several_hosts_are_shown_redacted_not_a_python_port_error(tmp_path, monkeypatch, capsys):
    """h1:1,h2:1 is a libpq URL urlsplit cannot read a port from: redacting it raised ValueError (exit 1)."""
    monkeypatch.setenv("INDEXER_HOME", str(tmp_path))
    assert main(["--database-url", "postgresql://u:pw-s3cret@127.0.0.1:1,127.0.0.2:1/db", "status"]) == 2
    err = capsys.readouterr().err
    assert "cannot connect to postgresql://" in err and "127.0.0.1:1,127.0.0.2:1/db" in err, err
    assert "s3cret" not in err and len(err.splitlines()) == 1


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


def test_every_log_line_of_a_command_is_one_redacted_bounded_line(tmp_path):
    """Whatever module logs a peer's text (a host's error, a node's answer), the CLI's log handler writes one line:
    run in a process of its own, where the CLI's logging set-up is the only one."""
    import os
    import subprocess
    import sys

    script = (
        "import logging, sys\n"
        "from indexer.cli import commands, main\n"
        "def noisy(args, settings):\n"
        "    logging.getLogger('indexer.sources.gonka.host').warning('host %s: %s', 'gonka1x', sys.argv[1])\n"
        "    return 0\n"
        "commands.cmd_status = noisy\n"
        "sys.exit(main(['status']))\n")
    text = f"GET postgresql://u:pw-secret@db/x password=hunter2 {HOSTILE}"
    res = subprocess.run([sys.executable, "-c", script, text], capture_output=True, timeout=60,
                         env={**os.environ, "INDEXER_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    err = res.stderr.decode()
    assert len(err.splitlines()) == 1 and err.startswith("WARNING host gonka1x: GET postgresql://***@db/x")
    for bad in ("\x1b", "\x07", "\r", "\u202e", "\u200b", "pw-secret", "hunter2"):
        assert bad not in err, repr(bad)
    assert len(err) < 4_100


def test_plain_lines_keep_their_own_line_breaks_but_no_peers_escape_sequences(capsys):
    """say() prints summaries that quote stored data (the demo's escrow id, a participant in the restitution lines)."""
    from indexer.cli.output import say

    say("check one: indexer evidence 9\x1b]0;pwned\x07\u202e 3\n  epoch 7 gonka1\x1b[2J")
    err = capsys.readouterr().err
    assert err == "check one: indexer evidence 9\\x1b]0;pwned\\x07\\u202e 3\n  epoch 7 gonka1\\x1b[2J\n"


@pytest.mark.parametrize("url", ["postgresql://u:SECRET%zzPW@127.0.0.1:1/db", "postgresql://u:SECRETPW@[::1/db",
                                 "postgresql://u@127.0.0.1:1/db?password=SECRET%zz"])
def test_libpq_quoting_a_url_it_cannot_parse_never_shows_its_password(url, tmp_path, monkeypatch, capsys):
    """libpq's error quotes the URL, or the password alone ('invalid percent-encoded token: "SECRET%zzPW"'), where
    no URL pattern finds it."""
    monkeypatch.setenv("INDEXER_HOME", str(tmp_path))
    assert main(["--database-url", url, "status"]) != 0
    err = capsys.readouterr().err
    assert "SECRET" not in err and err.startswith("error: ") and len(err.splitlines()) == 1, err


def test_the_readiness_body_and_log_never_show_the_password_libpq_quoted(caplog):
    from indexer.observe.metrics import DatabaseReader

    reader = DatabaseReader("postgresql://u:SECRET%zzPW@127.0.0.1:1/db", max_lag=60)
    with caplog.at_level("WARNING", logger="indexer.observe.metrics"):
        ready, body = reader.readiness()
    assert not ready and body["database"].startswith("unreachable: ")
    assert "SECRET" not in body["database"] and "SECRET" not in caplog.text and caplog.text


def test_an_error_shows_emoji_codes_as_written(tmp_path, monkeypatch, capsys):
    from indexer.cli import commands

    def fails(args, settings):
        raise RuntimeError("host gonka1:thumbs_up: answered :warning:")

    monkeypatch.setenv("INDEXER_HOME", str(tmp_path))
    monkeypatch.setattr(commands, "cmd_status", fails)
    assert main(["status"]) == 1
    assert capsys.readouterr().err == "error: RuntimeError: host gonka1:thumbs_up: answered :warning:\n"
