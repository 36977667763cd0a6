"""Issue 37 item 5: data in an alert (participant, model id, summary) cannot spoof or format a Slack or Telegram
message, and no message exceeds its service's limit, whatever the data; the webhook carries the values as JSON."""
from __future__ import annotations

import html
import re
from datetime import timedelta

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.alerts.channels import Slack, Telegram, Webhook
from indexer.alerts.delivery import deliver_due
from indexer.alerts.engine import Policy, evaluate
from indexer.alerts.messages import (ELLIPSIS, SLACK_TEXT_LIMIT, TELEGRAM_TEXT_LIMIT, WEBHOOK_ITEMS_LIMIT,
                                     WEBHOOK_VALUE_LIMIT, fit, slack_escape, slack_message, telegram_message, units,
                                     webhook_body)
from tests.support.alerts_kit import PROBE, Receiver, make_probe

HOSTILE = ["<!channel>", "<!here>", "<http://evil.example|click>", "&amp;", "a&b<c>d", "*bold* _it_ `code`",
           "\n[RESOLVED] probe: all good", "\u202eevil", "😀" * 3]


def _body(summary="s", key="probe:x", rule="probe", status="firing", severity="critical"):
    return {"alert_key": key, "rule": rule, "severity": severity, "status": status, "participant": None,
            "epoch_index": None, "summary": summary, "details": {}, "fired_at": "2026-12-01T12:00:00+00:00"}


def _slack_texts(message):
    yield message["text"]
    for block in message["blocks"]:
        if "text" in block:
            yield block["text"]["text"]
        for element in block.get("elements", []):
            yield element["text"]


def _check_slack(message):
    assert all(units(b["text"]["text"]) <= 150 for b in message["blocks"] if b["type"] == "header")
    for text in _slack_texts(message):
        assert units(text) <= SLACK_TEXT_LIMIT
        assert "<" not in text and ">" not in text  # no link, mention or special command can start
        assert re.fullmatch(r"(?:[^&]|&amp;|&lt;|&gt;)*", text, re.S), text  # every & starts one of our escapes


def test_slack_escapes_mentions_and_links():
    message = slack_message(_body(summary="host <!channel> <http://evil.example|click> & co", key="probe:<!here>"))
    _check_slack(message)
    assert message["text"] == "[CRITICAL] probe: host &lt;!channel&gt; &lt;http://evil.example|click&gt; &amp; co"
    assert message["blocks"][2]["elements"][0]["text"] == "probe:&lt;!here&gt;"


def test_a_20006_character_participant_is_cut_under_each_limit():
    huge = "gonka1" + "<" * 20000
    slack = slack_message(_body(summary=f"disputable penalty for {huge}"))
    _check_slack(slack)
    assert slack["blocks"][1]["text"]["text"].endswith("&lt;" + ELLIPSIS)  # cut between escapes, marked
    tg = telegram_message("-100", _body(summary=huge, key="probe:" + huge))
    assert units(tg["text"]) <= TELEGRAM_TEXT_LIMIT and ELLIPSIS in tg["text"]


def test_telegram_is_plain_text_with_one_line_per_field():
    tg = telegram_message("-100", _body(summary="x\n[RESOLVED] probe: fine <b>&amp;</b>"))
    assert "parse_mode" not in tg  # plain text: nothing is interpreted, so nothing needs escaping
    head, key = tg["text"].split("\n")
    assert head == "[CRITICAL] probe: x\ufffd[RESOLVED] probe: fine <b>&amp;</b>" and key == "probe:x"


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text(max_size=5000), st.sampled_from(HOSTILE), st.integers(0, 30000))
def test_any_value_stays_escaped_and_bounded(text, big, hostile, repeat):
    summary = (hostile * (repeat // max(1, len(hostile))))[:40000] + text + big
    body = _body(summary=summary, key="probe:" + hostile + text, rule=hostile + text)
    _check_slack(slack_message(body))
    tg = telegram_message("-100", body)
    assert units(tg["text"]) <= TELEGRAM_TEXT_LIMIT and tg["text"].count("\n") == 1


@given(st.text(), st.integers(1, 200))
def test_fit_never_cuts_inside_an_escape(text, limit):
    out = fit(text, limit, slack_escape)
    assert units(out) <= limit
    kept = out[:-1] if out.endswith(ELLIPSIS) and out != slack_escape(text) else out
    assert slack_escape(html.unescape(kept)) == kept and text.startswith(html.unescape(kept))


def test_hostile_values_on_the_wire(conn, db_url):
    make_probe(conn)
    receiver = Receiver()
    try:
        slack = Slack(receiver.url + "/services/T/B/x")
        telegram = Telegram("1:t", "-100", api_url=receiver.url)
        hook = Webhook(receiver.url + "/hook")
        participant = "<!channel>" + "&" * 20000
        conn.execute("INSERT INTO public.probe (k, v, participant) VALUES (%s, %s, %s)",
                     ("<!here>", participant, participant))
        channels = {c.name: c for c in (slack, telegram, hook)}
        evaluate(conn, [PROBE], [], Policy(resolve_after=1, cooldown=timedelta(0)))
        assert deliver_due(db_url, channels).delivered == 3
        by_path = {r.path: r.body for r in receiver.delivered()}
        _check_slack(by_path["/services/T/B/x"])
        assert units(by_path["/bot1:t/sendMessage"]["text"]) <= TELEGRAM_TEXT_LIMIT
        hook_body = by_path["/hook"]  # the webhook's JSON carries the value unescaped, cut at its bound
        assert hook_body["participant"] == participant[:WEBHOOK_VALUE_LIMIT - 1] + ELLIPSIS
        assert hook_body["details"]["v"] == hook_body["participant"] and hook_body["alert_key"] == "probe:<!here>"
        assert sorted(hook_body["truncated"]) == ["details.v", "participant", "summary"]
        assert orjson.loads(orjson.dumps(hook_body)) == hook_body
    finally:
        receiver.close()


def test_an_address_with_invisible_characters_cannot_pass_for_another():
    """gonka1abc<ZWSP>def looks like gonka1abcdef in a chat: every invisible character is shown as U+FFFD."""
    invisible = "\u200b\u200c\u200d\u2060\ufeff\u061c"
    body = _body(summary=f"disputable penalty for gonka1abc{invisible}def", key=f"probe:gonka1{invisible}")
    slack, tg = slack_message(body), telegram_message("-100", body)
    for text in [*_slack_texts(slack), tg["text"]]:
        assert not any(c in text for c in invisible), repr(text)
    assert "gonka1abc" + "\ufffd" * len(invisible) + "def" in tg["text"]


def test_slack_text_objects_are_plain_text_so_mrkdwn_emoji_mentions_and_urls_in_the_data_stay_text():
    """In mrkdwn, *x*, _x_, ~x~, `x` and :emoji: in a peer's value formatted (even verbatim); a bare URL,
    "#channel" and "@here" were made links or mentions without verbatim. plain_text with emoji off does neither."""
    summary = "gonka1*a*_b_~c~`d` :thumbs_up: > quote @here see http://phish.example #general"
    message = slack_message(_body(summary=summary, key="probe:*k*_:fire:_", rule="rule_*x*"))
    header, section, context = message["blocks"]
    assert [header["type"], section["type"], context["type"]] == ["header", "section", "context"]
    objects = [header["text"], section["text"], *context["elements"]]
    assert all(o == {"type": "plain_text", "text": o["text"], "emoji": False} for o in objects), objects
    assert [o["text"] for o in objects] == ["[CRITICAL] rule_*x*", summary.replace(">", "&gt;"), "probe:*k*_:fire:_"]
    assert message["mrkdwn"] is False and message["text"] == "[CRITICAL] rule_*x*: " + summary.replace(">", "&gt;")
    assert "mrkdwn" not in str(message["blocks"]) and units(header["text"]["text"]) <= 150


def test_slack_text_objects_are_never_empty():
    """Slack refuses a text object without text (the whole message is lost)."""
    message = slack_message(_body(summary="", key=""))
    assert all(t for t in _slack_texts(message))


def test_the_webhook_body_bounds_every_string_and_collection_and_says_what_it_cut():
    short = _body(summary="s" * WEBHOOK_VALUE_LIMIT)  # exactly at the bound: kept whole
    short["details"] = {"list": [1, "x", None, {"k": True}], "n": 2 ** 63 - 1}
    assert orjson.dumps(webhook_body(short)) == orjson.dumps(short)  # short values: the same bytes
    body = _body(summary="s" * 5000, key="probe:" + "k" * 5000)
    body["details"] = {"list": ["y" * 9000] + list(range(400)), "k" * 5000: "z", "map": {str(i): i for i in range(300)}}
    out = webhook_body(body)
    assert out["summary"] == "s" * (WEBHOOK_VALUE_LIMIT - 1) + ELLIPSIS and units(out["alert_key"]) == 4096
    assert out["details"]["list"][0].endswith(ELLIPSIS) and len(out["details"]["list"]) == WEBHOOK_ITEMS_LIMIT
    assert len(out["details"]["map"]) == WEBHOOK_ITEMS_LIMIT and out["details"]["map"]["255"] == 255
    long_key = "k" * (WEBHOOK_VALUE_LIMIT - 1) + ELLIPSIS
    assert out["details"][long_key] == "z"
    assert out["truncated"][:4] == ["alert_key", "summary", "details.list", "details.list[0]"]
    assert out["truncated"][5:] == ["details.map"] and out["truncated"][4].startswith("details.kkk")
    assert all(units(p) <= 300 for p in out["truncated"])
    assert body["summary"] == "s" * 5000  # the stored notification is not changed
