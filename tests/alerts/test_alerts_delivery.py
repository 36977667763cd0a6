"""The delivery worker against a real HTTP receiver: the webhook contract, retries with backoff while the receiver is
down, every attempt recorded, a crash between sending and recording repeats the same key and loses nothing, order
per alert key, and channel credentials kept out of the database."""
from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from indexer.alerts.channels import Slack, Telegram, Webhook, build_channels
from indexer.alerts.delivery import Backoff, deliver_due
from indexer.alerts.engine import Policy, evaluate
from tests.support.alerts_kit import PROBE, T0, Receiver, make_probe

POLICY = Policy(resolve_after=1, cooldown=timedelta(0))
BACKOFF = Backoff(first=5, cap=300, lease=30, give_up_after=timedelta(days=2), timeout=5)


class Clock:
    def __init__(self, at=timedelta(0)):
        self.now = T0 + at

    def __call__(self):
        return self.now


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def db(conn):
    make_probe(conn)
    return conn


def _deliveries(conn):
    return conn.execute("SELECT alert_key, channel, status, attempts, last_error, delivered_at IS NOT NULL "
                        "FROM api.alert_deliveries ORDER BY created_at, alert_key").fetchall()


def test_webhook_posts_the_contract_body_with_an_idempotency_key(db, db_url, receiver):
    hook = Webhook(receiver.url + "/hook")
    db.execute("INSERT INTO public.probe (k, participant, epoch_index) VALUES ('x', 'gonka1hostA', 408)")
    evaluate(db, [PROBE], [hook.name], POLICY, now=T0)
    s = deliver_due(db_url, {hook.name: hook}, backoff=BACKOFF, clock=Clock())
    assert (s.attempted, s.delivered) == (1, 1)
    (req,) = receiver.requests
    assert req.path == "/hook" and req.headers["Content-Type"] == "application/json"
    key = db.execute("SELECT idempotency_key FROM alert.delivery").fetchone()[0]
    assert req.headers["Idempotency-Key"] == key
    assert req.body == {"alert_key": "probe:x", "rule": "probe", "severity": "warning", "status": "firing",
                        "participant": "gonka1hostA", "epoch_index": 408, "summary": "probe x a",
                        "details": {"v": "a"}, "fired_at": T0.isoformat()}
    assert _deliveries(db) == [("probe:x", hook.name, "delivered", 1, None, True)]
    assert deliver_due(db_url, {hook.name: hook}, backoff=BACKOFF, clock=Clock()).attempted == 0


def test_receiver_down_for_an_hour_gets_every_notification_once_back(db, db_url, receiver):
    hook = Webhook(receiver.url)
    channels = {hook.name: hook}
    db.execute("INSERT INTO public.probe (k) VALUES ('a'), ('b'), ('c')")
    evaluate(db, [PROBE], [hook.name], POLICY, now=T0)
    db.execute("DELETE FROM public.probe WHERE k = 'c'")
    evaluate(db, [PROBE], [hook.name], POLICY, now=T0 + timedelta(minutes=1))  # c resolves: a 4th notification
    receiver.status = 503
    clock = Clock()
    for minute in range(0, 61):  # the worker runs every minute for an hour; the receiver answers 503
        clock.now = T0 + timedelta(minutes=minute)
        deliver_due(db_url, channels, backoff=BACKOFF, clock=clock)
    failed_attempts = len(receiver.requests)
    # backoff 5, 10, 20, ... capped at 300 s, on a worker that runs every minute: 17 tries per delivery in an hour
    # (minutes 0-6, then every 5 minutes); c's resolution waits behind c's firing, so it was never tried
    attempts = {(r[0], r[3]) for r in _deliveries(db)}
    assert attempts == {("probe:a", 17), ("probe:b", 17), ("probe:c", 17), ("probe:c", 0)}, attempts
    assert db.execute("SELECT count(*) FROM alert.delivery_attempt").fetchone()[0] == failed_attempts
    assert {r[4] for r in _deliveries(db)} == {"HTTP 503: ok", None}  # None: the resolution not tried yet
    receiver.status = 200
    clock.now = T0 + timedelta(minutes=66)  # within one capped backoff of coming back
    s = deliver_due(db_url, channels, backoff=BACKOFF, clock=clock)
    assert s.delivered == 4
    got = [(r.body["alert_key"], r.body["status"]) for r in receiver.delivered()]
    assert sorted(got) == [("probe:a", "firing"), ("probe:b", "firing"), ("probe:c", "firing"),
                           ("probe:c", "resolved")]
    assert got.index(("probe:c", "firing")) < got.index(("probe:c", "resolved"))  # order per key kept
    keys_by_notification = {}
    for r in receiver.requests:
        keys_by_notification.setdefault((r.body["alert_key"], r.body["status"]), set()).add(
            r.headers["Idempotency-Key"])
    assert all(len(keys) == 1 for keys in keys_by_notification.values())  # one key across all retries
    assert len({next(iter(k)) for k in keys_by_notification.values()}) == 4  # and a different one per notification
    assert {r[2] for r in _deliveries(db)} == {"delivered"}


class Crash(BaseException):
    """Stands for the process dying: not an Exception, so nothing in the worker handles it."""


class CrashAfterSend:
    def __init__(self, inner):
        self.inner, self.name = inner, inner.name

    def send(self, client, body, key, deadline):
        self.inner.send(client, body, key, deadline)
        raise Crash

    def scrub(self, text):
        return text


def test_crash_between_sending_and_recording_repeats_the_same_key(db, db_url, receiver):
    hook = Webhook(receiver.url)
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    evaluate(db, [PROBE], [hook.name], POLICY, now=T0)
    with pytest.raises(Crash):
        deliver_due(db_url, {hook.name: CrashAfterSend(hook)}, backoff=BACKOFF, clock=Clock())
    assert _deliveries(db)[0][2:4] == ("pending", 1)  # leased, not recorded
    assert deliver_due(db_url, {hook.name: hook}, backoff=BACKOFF, clock=Clock(timedelta(seconds=10))).attempted == 0
    s = deliver_due(db_url, {hook.name: hook}, backoff=BACKOFF, clock=Clock(timedelta(seconds=31)))  # lease over
    assert s.delivered == 1
    keys = [r.headers["Idempotency-Key"] for r in receiver.requests]
    assert len(keys) == 2 and keys[0] == keys[1]
    assert _deliveries(db)[0][2:4] == ("delivered", 2)


def test_a_delivery_that_never_succeeds_fails_after_give_up_and_says_why(db, db_url, receiver):
    hook = Webhook(receiver.url)
    receiver.status = 410
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    evaluate(db, [PROBE], [hook.name], POLICY, now=T0)
    deliver_due(db_url, {hook.name: hook}, backoff=BACKOFF, clock=Clock())
    assert _deliveries(db)[0][2] == "pending"
    deliver_due(db_url, {hook.name: hook}, backoff=BACKOFF, clock=Clock(timedelta(days=2, minutes=1)))
    assert _deliveries(db)[0][2:5] == ("failed", 2, "HTTP 410: ok")


def test_slack_and_telegram_send_to_their_routes_and_keep_credentials_out_of_the_database(db, db_url, receiver):
    slack = Slack(receiver.url + "/services/T000/B000/secretslackpath")
    telegram = Telegram("123456:secret-bot-token", "-100200", api_url=receiver.url)
    channels = {slack.name: slack, telegram.name: telegram}
    db.execute("INSERT INTO public.probe (k, severity) VALUES ('x', 'critical')")
    evaluate(db, [PROBE], list(channels), POLICY, now=T0)
    receiver.status = 500
    deliver_due(db_url, channels, backoff=BACKOFF, clock=Clock())
    receiver.status = 200
    deliver_due(db_url, channels, backoff=BACKOFF, clock=Clock(timedelta(minutes=1)))
    by_path = {r.path: r for r in receiver.delivered()}
    assert by_path["/services/T000/B000/secretslackpath"].body["text"] == "[CRITICAL] probe: probe x a"
    tg = by_path["/bot123456:secret-bot-token/sendMessage"]
    assert tg.body["chat_id"] == "-100200" and tg.body["text"].startswith("[CRITICAL] probe: probe x a")
    dump = str(db.execute("SELECT array_agg(t::text) FROM alert.delivery t").fetchone()[0]) + str(
        db.execute("SELECT array_agg(t::text) FROM alert.delivery_attempt t").fetchone()[0])
    assert "secret" not in dump and "telegram:-100200#" in dump and "slack#" in dump


def test_channel_configuration_errors_are_clear():
    with pytest.raises(ValueError, match="not an http"):
        Webhook("ftp://example.org/x")
    with pytest.raises(ValueError, match="INDEXER_ALERT_TELEGRAM_CHATS"):
        build_channels(telegram_token="t")
    names = list(build_channels(["https://hooks.example.org/a?token=s3cret"], telegram_token="t",
                                telegram_chats=["1"]))
    assert names[0].startswith("webhook:hooks.example.org#") and "s3cret" not in names[0]


def test_two_workers_never_send_one_delivery_at_the_same_time(db, db_url, receiver):
    hook = Webhook(receiver.url)
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    evaluate(db, [PROBE], [hook.name], POLICY, now=T0)
    with psycopg.connect(db_url) as holder:  # another worker holds the row while it leases it
        holder.execute("SELECT 1 FROM alert.delivery FOR UPDATE")
        assert deliver_due(db_url, {hook.name: hook}, backoff=BACKOFF, clock=Clock()).attempted == 0
    assert deliver_due(db_url, {hook.name: hook}, backoff=BACKOFF, clock=Clock()).delivered == 1


def test_a_receivers_answer_is_stored_and_logged_as_one_scrubbed_bounded_line(db, db_url, receiver, caplog):
    """A proxy before Slack or a webhook may echo the request's path (the Slack credential, a ?token= query) in its
    error page, with line breaks and terminal escapes that would forge a log line."""
    slack = Slack(receiver.url + "/services/T000/B000/secretslackpath")
    hook = Webhook(receiver.url + "/hook?token=s3cret-webhook-token")
    telegram = Telegram("123456:secret-bot-token", "-100200", api_url=receiver.url)
    channels = {c.name: c for c in (slack, hook, telegram)}
    receiver.answer = lambda path: (f"{'x' * 20} no route for POST {path}\r\n\x1b[2J"
                                    "alert delivery ok\u202e\n" + "y" * 5000).encode()
    receiver.status = 404
    db.execute("INSERT INTO public.probe (k) VALUES ('x\nINFO forged line')")
    evaluate(db, [PROBE], list(channels), POLICY, now=T0)
    with caplog.at_level("WARNING", logger="indexer.alerts.delivery"):
        deliver_due(db_url, channels, backoff=BACKOFF, clock=Clock())
    errors = [r[4] for r in _deliveries(db)]
    assert len(errors) == 3 and all(e.startswith("HTTP 404: xxx") for e in errors)
    logged = [r.getMessage() for r in caplog.records if "alert delivery" in r.getMessage()]
    assert len(logged) == 3
    for text in errors + logged:
        assert "secret" not in text and "s3cret" not in text
        assert not any(c in text for c in "\n\r\x1b\u202e"), repr(text)
    assert all(len(e) <= 300 and e.endswith("…") for e in errors)


def test_a_channel_url_the_client_refuses_is_that_channels_failed_attempt_not_the_passs_end(db, db_url, receiver,
                                                                                            caplog):
    """A URL past the configuration checks that httpx refuses at send time (InvalidURL and UnicodeError are no
    httpx.HTTPError) fails that channel's attempt with one scrubbed line; the other channels are still delivered."""
    good = Webhook(receiver.url + "/hook")
    bad_port = Webhook(receiver.url + "/a?token=s3cret-one")
    bad_port.url = "http://127.0.0.1:abc/a?token=s3cret-one"
    bad_host = Webhook(receiver.url + "/b?token=s3cret-two")
    bad_host.url = "http://" + "a" * 64 + ".example/b?token=s3cret-two"  # a DNS label is at most 63 characters
    channels = {c.name: c for c in (bad_port, good, bad_host)}
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    evaluate(db, [PROBE], list(channels), POLICY, now=T0)
    with caplog.at_level("WARNING", logger="indexer.alerts.delivery"):
        s = deliver_due(db_url, channels, backoff=BACKOFF, clock=Clock())
    assert (s.attempted, s.delivered, s.retrying) == (3, 1, 2)
    assert [r.path for r in receiver.requests] == ["/hook"]
    rows = {r[1]: r for r in _deliveries(db)}
    assert rows[good.name][2:4] == ("delivered", 1)
    assert rows[bad_port.name][2:4] == ("pending", 1) and rows[bad_port.name][4].startswith("InvalidURL: ")
    assert rows[bad_host.name][2:4] == ("pending", 1) and rows[bad_host.name][4].startswith("UnicodeError: ")
    logged = [r.getMessage() for r in caplog.records]
    for text in [rows[bad_port.name][4], rows[bad_host.name][4], *logged]:
        assert "s3cret" not in text and "\n" not in text, text


def test_credentials_in_a_channel_urls_userinfo_are_scrubbed_like_the_bot_token(db, db_url, receiver, caplog):
    """https://user:pass@host: httpx sends them as Basic authorization; a proxy that echoes the header, the URL or
    the pair in its error page must not put them in the deliveries table or the log."""
    import base64

    at = receiver.url.replace("http://", "")
    slack = Slack(f"http://sl-user:s3cret-sl@{at}/services/T/B/x")
    hook = Webhook(f"http://wh-user:s3cret%2Dwh@{at}/hook")
    telegram = Telegram("1:t", "-100", api_url=f"http://tg-user:s3cret-tg@{at}")
    channels = {c.name: c for c in (slack, hook, telegram)}

    def echo(path):  # the request's own Authorization header, the pair in it, the user and the password alone
        auth = receiver.requests[-1].headers["Authorization"]
        pair = base64.b64decode(auth.split()[1]).decode()
        return f"denied {auth} for {pair} (user {pair.split(':')[0]}, password {pair.split(':')[1]})".encode()

    receiver.answer = echo
    receiver.status = 401
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    evaluate(db, [PROBE], list(channels), POLICY, now=T0)
    with caplog.at_level("WARNING", logger="indexer.alerts.delivery"):
        deliver_due(db_url, channels, backoff=BACKOFF, clock=Clock())
    assert {r.headers["Authorization"].split()[0] for r in receiver.requests} == {"Basic"}  # the userinfo was sent
    basics = [base64.b64encode(pair.encode()).decode()
              for pair in ("sl-user:s3cret-sl", "wh-user:s3cret-wh", "tg-user:s3cret-tg")]
    errors = [r[4] for r in _deliveries(db)]
    dump = str(db.execute("SELECT array_agg(t::text) FROM alert.delivery_attempt t").fetchone()[0])
    logged = [r.getMessage() for r in caplog.records]
    assert len(errors) == 3 and all(e.startswith("HTTP 401: denied Basic ***") for e in errors), errors
    for text in [*errors, dump, *logged]:
        assert "s3cret" not in text and not any(b in text for b in basics), text
        assert not any(user in text for user in ("sl-user", "wh-user", "tg-user")), text


def test_a_number_past_64_bits_in_details_is_sent_as_it_is(db, db_url, receiver):
    """orjson refuses an integer past 64 bits (a custom rule's numeric sum): the send raised TypeError, which ended
    the pass and left the delivery leased, on every pass."""
    from pathlib import Path

    from indexer.alerts.rules import Rule

    big = Rule("big", Path("big.sql"), "SELECT 'big:' || k AS alert_key, severity, participant, epoch_index, "
                                       "'big' AS summary, jsonb_build_object('n', '1180591620717411303424'::numeric) "
                                       "AS details FROM public.probe")
    hook = Webhook(receiver.url)
    db.execute("INSERT INTO public.probe (k) VALUES ('x')")
    evaluate(db, [big], [hook.name], POLICY, now=T0)
    assert deliver_due(db_url, {hook.name: hook}, backoff=BACKOFF, clock=Clock()).delivered == 1
    assert receiver.requests[0].body["details"] == {"n": 2 ** 70}
