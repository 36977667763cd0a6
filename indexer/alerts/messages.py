"""Chat messages built from a notification body, escaped for each channel's syntax and bounded by its limits.

Every field of a body comes from chain data or a rule (a participant or model id is whatever a peer chose), so:

* Slack (incoming webhooks, Block Kit): every text object is ``plain_text`` with ``emoji: false``, so ``*bold*``,
  ``_italic_``, ``~strike~``, backticks, quotes and ``:emoji:`` in the data stay characters, and no bare URL,
  ``#channel`` or ``@here`` becomes a link or mention (``verbatim`` exists only for mrkdwn objects, none are sent);
  the top-level ``text`` (the notification's fallback) is sent with ``mrkdwn: false``. ``&``, ``<`` and ``>``
  are Slack's control characters in every text (``<!channel>``, ``<http://x|label>``) and are sent as ``&amp;``,
  ``&lt;``, ``&gt;``. A section's text is limited to 3,000 characters (the top-level ``text`` too), a header's
  to 150.
* Telegram (``sendMessage`` without ``parse_mode``): the text is plain, nothing is interpreted, so nothing is
  escaped; a message is limited to 4,096 characters.
* Both: control, line-separator, bidirectional-override and zero-width characters are shown as U+FFFD, so a value
  cannot start a line that looks like another alert, reorder the text around it or pass for another address.

Lengths are counted in UTF-16 code units (at least the number of characters, whichever way a service counts) and
every cut happens between escaped characters, ending with an ellipsis. The webhook body is JSON (serialised by
orjson, which escapes it) and carries the values unchanged up to a bound: a string (a value, or a key of
``details``) at most 4,096 units, a list or object in ``details`` at most 256 items; what was cut is listed by path
under ``"truncated"``, a key absent when nothing was.
"""
from __future__ import annotations

import re

SLACK_TEXT_LIMIT = 3000
TELEGRAM_TEXT_LIMIT = 4096
RULE_LIMIT = 100       # a rule name is a file name: short, but bounded anyway
KEY_LIMIT = 300        # an alert key in the context line
ELLIPSIS = "…"
WEBHOOK_VALUE_LIMIT = 4096  # units of one string in a webhook body (as a Telegram message: a summary fits whole)
WEBHOOK_ITEMS_LIMIT = 256   # items of one list or object in a webhook body's details (as records' ARGS, MAX_SLOTS)

# C0/C1 controls, line and paragraph separators, bidi marks, embeddings, overrides and isolates, and the invisible
# characters that make one address look like another (zero-width space/joiners, word joiner, invisible operators,
# byte-order mark)
UNSAFE = re.compile("[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_SLACK = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def units(text: str) -> int:
    """Length in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def plain(value: object) -> str:
    return UNSAFE.sub("\ufffd", "" if value is None else str(value))


def slack_escape(text: str) -> str:
    return "".join(_SLACK.get(c, c) for c in text)


def fit(text: str, limit: int, escape=lambda c: c) -> str:
    """``escape(text)`` if it fits in ``limit`` units, else the longest escaped prefix that fits with an ellipsis
    (cut between characters, never inside an escape)."""
    pieces = [escape(c) for c in text]
    if sum(units(p) for p in pieces) <= limit:
        return "".join(pieces)
    room, kept = limit - units(ELLIPSIS), []
    for piece in pieces:
        room -= units(piece)
        if room < 0:
            break
        kept.append(piece)
    return "".join(kept) + ELLIPSIS


def _head(body: dict) -> str:
    return "RESOLVED" if body.get("status") == "resolved" else plain(body.get("severity")).upper()[:10]


def _slack_plain(text: str, empty: str) -> dict:
    """A ``plain_text`` object: Slack applies no mrkdwn to it, so ``*``, ``_``, ``~``, backticks and ``> `` in the
    data stay characters and no link or mention is parsed; ``emoji: false`` keeps ``:thumbs_up:`` text too. Slack
    still reads &, < and > as its control characters in every text object, so the text comes escaped. A text object
    may not be empty."""
    return {"type": "plain_text", "text": text or empty, "emoji": False}


def slack_message(body: dict) -> dict:
    head = f"[{_head(body)}] {fit(plain(body.get('rule')), RULE_LIMIT, slack_escape)}"  # <= 111 of a header's 150
    summary = fit(plain(body.get("summary")), SLACK_TEXT_LIMIT - units(head) - 6, slack_escape)
    key = fit(plain(body.get("alert_key")), KEY_LIMIT, slack_escape)
    # every text object is plain_text (a header block shows the head in bold without mrkdwn); the top-level text is
    # the notification's fallback, sent with mrkdwn off for the same reason
    return {"text": f"{head}: {summary}", "mrkdwn": False,
            "blocks": [{"type": "header", "text": _slack_plain(head, "alert")},
                       {"type": "section", "text": _slack_plain(summary, "(no summary)")},
                       {"type": "context", "elements": [_slack_plain(key, "(no key)")]}]}


def telegram_message(chat_id: str, body: dict) -> dict:
    head = f"[{_head(body)}] {fit(plain(body.get('rule')), RULE_LIMIT)}"
    key = fit(plain(body.get("alert_key")), KEY_LIMIT)
    summary = fit(plain(body.get("summary")), TELEGRAM_TEXT_LIMIT - units(head) - units(key) - 3)
    return {"chat_id": chat_id, "text": f"{head}: {summary}\n{key}", "disable_web_page_preview": True}


def webhook_body(body: dict) -> dict:
    """The body for the generic webhook: the notification's values as they are, bounded. A longer string keeps its
    first WEBHOOK_VALUE_LIMIT units (with an ellipsis), a longer list or object in ``details`` its first
    WEBHOOK_ITEMS_LIMIT items; ``"truncated"`` lists the path of each value cut (``participant``, ``details.v``,
    ``details.list[3]``), and is absent when nothing was, so a body of short values is sent as it was."""
    cut: list[str] = []
    out = {key: _bounded(value, key, cut) for key, value in body.items()}
    if cut:
        out["truncated"] = [fit(path, KEY_LIMIT) for path in cut[:WEBHOOK_ITEMS_LIMIT]]
    return out


def _bounded(value: object, path: str, cut: list[str]) -> object:
    if isinstance(value, str):
        short = fit(value, WEBHOOK_VALUE_LIMIT)
        if short != value:
            cut.append(path)
        return short
    if isinstance(value, (dict, list)):
        items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        if len(items) > WEBHOOK_ITEMS_LIMIT:
            cut.append(path)
            items = items[:WEBHOOK_ITEMS_LIMIT]
        if isinstance(value, list):
            return [_bounded(v, f"{path}[{i}]", cut) for i, v in items]
        out = {}
        for key, v in items:
            short = fit(str(key), WEBHOOK_VALUE_LIMIT)
            if short != key:
                cut.append(f"{path}.{short}")
            out[short] = _bounded(v, f"{path}.{short}", cut)
        return out
    return value
