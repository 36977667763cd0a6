"""A member of an escrow's group answering with another escrow's data, or with a tip short of what the chain
settled: the hostile proxy (tests/support/hostile.py) in front of the devnet rewrites one member's answers. The
member's answer is not believed (recorded against it in net.failure), the escrow is read from the honest members,
and nothing of another escrow is written under it, nor any of its rows under another escrow."""
from __future__ import annotations

import psycopg
import pytest

from indexer.db.scratch import scratch_database
from indexer.poller import poll_once
from indexer.sources.gonka import RetryPolicy
from tests.support.faultplan import scenario
from tests.support.hostile import hostile_devnet, rewrite

FAST = dict(backoff_base=0.0002, backoff_max=0.002, timeout=5.0, attempts=3, deadline=5.0)
SCN = scenario("a")                      # two epochs of two escrows, ten hosts
VICTIM, OTHER = SCN.epochs[0].escrows[:2]
FIRST = VICTIM.slots[0]                  # the member asked first for the victim's shard detail and log
FIRST_NAME = SCN.hosts_by_address[FIRST].name
OTHER_HOST = SCN.hosts_by_address[OTHER.slots[0]].name
DETAIL = rf"^/hosts/{FIRST_NAME}/devshard/[^/]+/stats/shards/{VICTIM.escrow_id}$"


def _poll(url: str, net) -> object:
    return poll_once(url, net.chain_rest_url, net.rpc_url, policy=RetryPolicy(**FAST), decode_workers=0,
                     payload_workers=0, escrow_workers=1, private_hosts=True)


def _state(url: str) -> dict:
    """What the cycle stored of the first epoch's escrows: host stats, tx rows and cursors per escrow."""
    ids = [e.escrow_id for e in SCN.epochs[0].escrows]
    with psycopg.connect(url) as c:
        stats = c.execute("SELECT escrow_id, slot_id, missed, invalid, cost FROM rec.host_stats "
                          "WHERE escrow_id = ANY(%s) ORDER BY 1, 2", (ids,)).fetchall()
        starts = c.execute("SELECT escrow_id, count(*) FROM rec.start_tx WHERE escrow_id = ANY(%s) GROUP BY 1 "
                           "ORDER BY 1", (ids,)).fetchall()
        cursors = c.execute("SELECT source, cursor FROM net.cursor WHERE source LIKE 'escrow%%' ORDER BY 1").fetchall()
        escrows = c.execute("SELECT escrow_id, extra ->> 'settle_nonce' FROM rec.escrow ORDER BY 1").fetchall()
    return {"stats": stats, "starts": starts, "cursors": cursors, "escrows": escrows}


def _failures(url: str, source: str) -> list[str]:
    with psycopg.connect(url) as c:
        return [e for (e,) in c.execute("SELECT error FROM net.failure WHERE source = %s", (source,))]


@pytest.fixture(scope="module")
def clean(pg_admin_url, template_db):
    """The first epoch's escrows as a clean cycle stores them once they settled (clock at the second epoch)."""
    with scratch_database(pg_admin_url, "indexer_misattributed_ref", template=template_db) as url:
        with hostile_devnet(SCN) as (net, _):
            net.advance_epoch()
            _poll(url, net)
        return _state(url)


def _clean_despite(db_url: str, route: str, rule, clean: dict) -> list[str]:
    """Poll a devnet whose ``route`` answers go through ``rule`` (tests.support.hostile.rewrite): no escrow fails,
    the rows are the clean run's; returns what was recorded against the first member."""
    with hostile_devnet(SCN) as (net, proxy):
        net.advance_epoch()
        proxy.on(route, rule)
        summary = _poll(db_url, net)
        assert proxy.hits[route] >= 1
    assert summary.escrows_failed == 0
    assert _state(db_url) == clean
    return _failures(db_url, f"host:{FIRST}")


def test_a_shard_detail_of_another_escrow_is_a_failure_of_that_member(db_url, clean):
    """The first member answers the victim's shard detail with the other escrow's (a real one, served by its own
    group): its nonce, stats and id are not taken. The detail is read from the next member, the victim ends final
    with its own stats, and the other escrow's rows are the clean run's."""
    said = _clean_despite(db_url, DETAIL, rewrite(lambda data, req: data, target=lambda t: t.replace(
        f"/hosts/{FIRST_NAME}/", f"/hosts/{OTHER_HOST}/").replace(f"/shards/{VICTIM.escrow_id}",
                                                                 f"/shards/{OTHER.escrow_id}")), clean)
    assert any(f"escrow {OTHER.escrow_id}" in e and f"asked for escrow {VICTIM.escrow_id}" in e for e in said), said


@pytest.mark.parametrize("shift", [-3, 5], ids=["under", "over"])
def test_a_member_misreporting_a_settled_escrow_s_nonce_does_not_decide_where_its_log_ends(db_url, clean, shift):
    """The first member reports the settled victim's nonce 3 short of (or 5 past) the one its settlement names, and
    serves the log as it is. The settlement (signed by a quorum of the group) decides where the log ends: short, the
    escrow would be marked final with its tail never read; past, it would never be complete, and never final. The
    log is read to the settlement's nonce, the member's claim recorded against it, and the rows are a clean run's."""
    def detail(body, req):
        body["nonce"] = int(body["nonce"]) + shift
        return body

    said = _clean_despite(db_url, DETAIL, rewrite(detail), clean)
    want = f"reports nonce {VICTIM.last_nonce + shift}, but its settlement names nonce {VICTIM.last_nonce}"
    assert any(want in e for e in said), said


def test_a_member_behind_the_settled_nonce_does_not_give_the_final_host_stats(db_url, clean):
    """The first member reports the settled victim's nonce 3 short, with each counter one short (its view of the
    session before the end): it is recorded as behind, its stats are not taken, and the final host stats come from
    a member whose detail names the settled nonce: the rows are a clean run's."""
    def behind(body, req):
        body["nonce"] = int(body["nonce"]) - 3
        for st in body["host_stats"].values():
            for key, value in list(st.items()):
                if isinstance(value, (int, str)) and str(value).isdigit() and int(value) > 0 and key != "slot_id":
                    st[key] = int(value) - 1
        return body

    said = _clean_despite(db_url, DETAIL, rewrite(behind), clean)
    assert any("but its settlement names nonce" in e for e in said), said


def test_a_diff_log_of_another_escrow_fails_the_signed_check_and_is_read_from_the_next_member(db_url, clean):
    """The first member answers every diffs page of the victim with the other escrow's pages (same nonces, a real
    log the user signed, for another escrow id): the user signed each diff over its own escrow's id, so the check
    fails, the member is skipped (recorded), and the victim's log is read from the next member."""
    route = rf"^/hosts/{FIRST_NAME}/devshard/[^/]+/sessions/{VICTIM.escrow_id}/diffs$"
    said = _clean_despite(db_url, route, rewrite(lambda data, req: data, target=lambda t: t.replace(
        f"/hosts/{FIRST_NAME}/", f"/hosts/{OTHER_HOST}/").replace(f"/sessions/{VICTIM.escrow_id}/",
                                                                 f"/sessions/{OTHER.escrow_id}/")), clean)
    assert any(f"escrow {VICTIM.escrow_id}" in e and "signed check failed" in e for e in said), said


@pytest.mark.parametrize("nonce", [str((1 << 64) - 1), str(1 << 63), "-1", "many"])
def test_a_shard_detail_with_a_nonce_no_log_can_reach_is_a_failure_of_that_member(db_url, nonce):
    """The first member reports an open escrow's nonce as a u64 past what any log (and a bigint column) can reach,
    or as no unsigned integer at all: the member fails, recorded, and the detail is read from the next one. Taken,
    the first would have failed the whole cycle when the watchdog stored it, the others the escrow, on every
    cycle."""
    def detail(body, req):
        body["nonce"] = nonce
        return body

    with hostile_devnet(SCN) as (net, proxy):
        proxy.on(DETAIL, rewrite(detail))
        summary = _poll(db_url, net)
        assert proxy.hits[DETAIL] >= 1
    assert summary.escrows_failed == 0
    with psycopg.connect(db_url) as c:
        cursor = c.execute("SELECT cursor FROM net.cursor WHERE source = %s", (f"escrow:{VICTIM.escrow_id}",)
                           ).fetchone()
        progress = c.execute("SELECT source_position FROM net.progress WHERE source = %s",
                             (f"escrow:{VICTIM.escrow_id}",)).fetchone()
    assert cursor == (str(VICTIM.last_nonce),) and progress == (VICTIM.last_nonce,)
    said = _failures(db_url, f"host:{FIRST}")
    assert any("shard detail: nonce" in e for e in said), said
