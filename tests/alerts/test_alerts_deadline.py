"""Issue 37 items 3 and 4: a receiver that drips its answer cannot stall delivery past the send's deadline nor cause a
second worker to send the same notification; one slow channel does not hold the others; deliveries follow the
channels configured where delivery runs, whatever the evaluation that wrote the notification had."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from indexer.alerts.channels import Webhook
from indexer.alerts.delivery import Backoff, deliver_due
from indexer.alerts.engine import Policy, evaluate
from tests.support.alerts_kit import PROBE, T0, Dripping, Receiver, make_probe

POLICY = Policy(resolve_after=1, cooldown=timedelta(0))
FAST = Backoff(first=5, cap=300, lease=30, timeout=5, deadline=1.0)


class Clock:
    def __init__(self, at=timedelta(0)):
        self.now = T0 + at

    def __call__(self):
        return self.now


@pytest.fixture
def db(conn):
    make_probe(conn)
    return conn


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _state(conn):
    return conn.execute("SELECT channel, status, attempts, last_error FROM api.alert_deliveries "
                        "ORDER BY channel, created_at").fetchall()


@pytest.mark.parametrize("head", [False, True], ids=["body-drips", "headers-drip"])
def test_a_dripping_receiver_is_given_up_on_within_the_deadline_and_retried_once(db, db_url, head):
    drip = Dripping(pace=0.3, head=head)  # 40 body bytes at 0.3 s: 12 s per answer if nothing cut it
    try:
        hook = Webhook(drip.url)
        db.execute("INSERT INTO public.probe (k) VALUES ('x')")
        evaluate(db, [PROBE], [], POLICY, now=T0)
        result, started = {}, time.monotonic()
        first = threading.Thread(target=lambda: result.update(s=deliver_due(db_url, {hook.name: hook},
                                                                            backoff=FAST, clock=Clock())))
        first.start()
        assert drip.received.wait(10)
        # a second worker while the first is still sending: the lease holds, nothing is sent twice
        assert deliver_due(db_url, {hook.name: hook}, backoff=FAST, clock=Clock(timedelta(seconds=1))).attempted == 0
        first.join(10)
        elapsed = time.monotonic() - started
        assert not first.is_alive() and elapsed < FAST.deadline + 2, elapsed
        assert (result["s"].attempted, result["s"].retrying) == (1, 1)
        ((_, status, attempts, error),) = _state(db)
        assert (status, attempts) == ("pending", 1) and error == "DeadlineExceeded: no complete answer within 1 s"
        assert len(drip.keys) == 1
        # still within the lease and the backoff: nobody sends it
        assert deliver_due(db_url, {hook.name: hook}, backoff=FAST, clock=Clock(timedelta(seconds=4))).attempted == 0
        drip.received.clear()
        again = deliver_due(db_url, {hook.name: hook}, backoff=FAST, clock=Clock(timedelta(seconds=6)))
        assert again.retrying == 1 and len(drip.keys) == 2 and drip.keys[0] == drip.keys[1]
    finally:
        drip.close()


def test_a_slow_channel_does_not_hold_the_others(db, db_url, receiver):
    drip = Dripping(pace=0.3)
    try:
        slow, good = Webhook(drip.url + "/slow"), Webhook(receiver.url + "/good")
        db.execute("INSERT INTO public.probe (k) VALUES ('x'), ('y')")
        evaluate(db, [PROBE], [slow.name, good.name], POLICY, now=T0)
        s = deliver_due(db_url, {slow.name: slow, good.name: good}, backoff=FAST, clock=Clock())
        assert (s.attempted, s.delivered, s.retrying) == (4, 2, 2)  # the slow one gave up on both
        assert [r.body["alert_key"] for r in receiver.delivered()] == ["probe:x", "probe:y"]
        assert all(r.at < drip.hung_up[0] for r in receiver.requests)  # sent while the slow one was still dripping
    finally:
        drip.close()


def test_the_deadline_must_be_shorter_than_the_lease():
    with pytest.raises(ValueError, match="shorter than its lease"):
        Backoff(lease=30, deadline=30)


def test_notifications_evaluated_without_channels_reach_the_channels_configured_later(db, db_url, receiver):
    db.execute("INSERT INTO public.probe (k) VALUES ('gone'), ('x')")
    evaluate(db, [PROBE], [], POLICY, now=T0)  # the poller: no channels
    db.execute("DELETE FROM public.probe WHERE k = 'gone'")
    evaluate(db, [PROBE], [], POLICY, now=T0 + timedelta(minutes=1))  # 'gone' resolves before any channel exists
    assert _state(db) == []
    hook = Webhook(receiver.url + "/later")
    s = deliver_due(db_url, {hook.name: hook}, clock=Clock(timedelta(minutes=2)))
    assert (s.enrolled, s.delivered) == (1, 1)  # what is still firing; not the history of 'gone'
    assert [(r.body["alert_key"], r.body["status"]) for r in receiver.delivered()] == [("probe:x", "firing")]
    assert deliver_due(db_url, {hook.name: hook}, clock=Clock(timedelta(minutes=3))).attempted == 0  # once
    db.execute("DELETE FROM public.probe")
    evaluate(db, [PROBE], [], POLICY, now=T0 + timedelta(minutes=4))  # x resolves, again without channels
    s = deliver_due(db_url, {hook.name: hook}, clock=Clock(timedelta(minutes=5)))
    assert (s.enrolled, s.delivered) == (1, 1)  # it heard x fire, so it hears x resolve
    assert [(r.body["alert_key"], r.body["status"]) for r in receiver.delivered()][-1] == ("probe:x", "resolved")


def test_a_delivery_worker_with_other_channels_than_the_evaluation_still_delivers(db, db_url, receiver):
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    evaluate(db, [PROBE], ["webhook:elsewhere#00000000"], POLICY, now=T0)
    hook = Webhook(receiver.url)
    assert deliver_due(db_url, {hook.name: hook}, clock=Clock()).delivered == 1
    assert {(c, st) for c, st, *_ in _state(db)} == {("webhook:elsewhere#00000000", "pending"),
                                                     (hook.name, "delivered")}


def test_cli_alerts_without_channels_then_with_a_webhook_delivers_what_is_firing(db, db_url, receiver, tmp_path):
    import os
    import subprocess
    import sys

    from tests.support.alerts_kit import PROBE_SQL

    (tmp_path / "probe.sql").write_text(PROBE_SQL)
    db.execute("INSERT INTO public.probe (k) VALUES ('x'), ('y')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_ALERT_")}

    def alerts(*extra):
        return subprocess.run([sys.executable, "-m", "indexer", "--database-url", db_url, "alerts", "--once",
                               "--rules-dir", str(tmp_path), *extra], env=env, capture_output=True, text=True,
                              timeout=120)

    quiet = alerts()
    assert quiet.returncode == 0, quiet.stderr
    assert "delivered by any `indexer alerts`" in quiet.stdout + quiet.stderr
    loud = alerts("--webhook", receiver.url + "/late")
    assert loud.returncode == 0, loud.stderr
    assert sorted(r.body["alert_key"] for r in receiver.delivered()) == ["probe:x", "probe:y"]
    assert "2 delivered" in loud.stdout + loud.stderr
