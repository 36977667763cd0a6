"""Issue 37 item 9: `indexer alerts --silence` refuses unknown rules naming the known ones; `--silences` lists the
silences in force and `--unsilence` ends them, after which the alerts they covered are notified."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

from indexer.alerts.engine import Policy, evaluate, silence, unsilence
from tests.support.alerts_kit import PROBE, T0, make_probe


def _alerts(db_url, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_ALERT_")}
    return subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "alerts", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_silence_list_and_lift_through_the_cli(db_url, conn):
    for target in ("no_such_rule", "no_such_rule:gonka1x"):
        bad = _alerts(db_url, "--silence", target)
        assert bad.returncode == 2 and "unknown alert rule 'no_such_rule'" in bad.stderr
        assert "known rules:" in bad.stderr and "disputable_penalty" in bad.stderr
    assert conn.execute("SELECT count(*) FROM alert.silence").fetchone()[0] == 0
    ok = _alerts(db_url, "--silence", "disputable_penalty", "--for", "2h", "--reason", "upgrade\nwindow")
    assert ok.returncode == 0, ok.stderr
    listed = _alerts(db_url, "--silences")
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    kind, target, until, reason = line.split("\t")
    assert (kind, target, reason) == ("rule", "disputable_penalty", "upgrade\ufffdwindow")
    assert until.startswith("until ")
    lifted = _alerts(db_url, "--unsilence", "disputable_penalty")
    assert lifted.returncode == 0 and "lifted 1 silence(s)" in lifted.stderr
    assert _alerts(db_url, "--silences").stdout == ""
    again = _alerts(db_url, "--unsilence", "disputable_penalty")
    assert again.returncode == 2 and "no silence in force for 'disputable_penalty' (in force: none)" in again.stderr


def test_an_alert_silenced_then_unsilenced_is_notified_at_the_next_evaluation(conn):
    make_probe(conn)
    policy = Policy(resolve_after=1, cooldown=timedelta(0))
    silence(conn, "probe", timedelta(hours=2), now=T0)
    conn.execute("INSERT INTO public.probe (k) VALUES ('x')")
    assert evaluate(conn, [PROBE], [], policy, now=T0 + timedelta(minutes=1)).notifications == 0
    assert unsilence(conn, "probe", now=T0 + timedelta(minutes=2)) == 1
    assert unsilence(conn, "probe", now=T0 + timedelta(minutes=2)) == 0
    assert evaluate(conn, [PROBE], [], policy, now=T0 + timedelta(minutes=3)).notifications == 1
