"""Devshard host routes (§5.2) and the group of hosts that serve one escrow's log.

Any member of an escrow's group (the participants of its slots, found at ``participant/{addr}.inference_url``)
keeps the escrow's diff log. :class:`HostGroup` reads runs of pages (≤ 64 nonces each) from one member and checks
the last state root of every run against a second member; on disagreement a third member decides (with
none, the read fails and the escrow waits for a later cycle), and a member that failed or diverged is skipped for
the rest of the escrow.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Collection, Sequence

from indexer.records import NAME_LEN
from indexer.sources.gonka.http import Fetcher, FetchError
from indexer.sources.gonka.rpcpayloads import (
    ERROR_HEADER, HTTP_SESSION_RETIRED, ConnectPayloads, PayloadShapeError, RpcNotServed, rpc_base,
)
from indexer.sources.gonka.signing import Operator
from indexer.wire.diffs import b64decode, diff_from_host_json, diff_header_from_host_json, state_root
from indexer.wire.errors import WireDecodeError
from indexer.wire.schemas import version_key

log = logging.getLogger(__name__)
PAGE_NONCES = 64
MAX_VERSIONS = 64  # protocol versions one host may name in healthz (a host runs one child per version)

# which payload route a host speaks (DevshardHost.route): the HTTP GET route, Connect RPC after the HTTP route
# answered 410 http_session_retired, or neither (retired, and no Connect service or no operator mode to attach with)
ROUTE_HTTP, ROUTE_RPC, ROUTE_NONE = "http", "connect-rpc", "none"
Diagnosis = Callable[[str, str, str, bool], None]  # (source, url, message, transient): a net.failure row


def _gone(status: int, body: bytes) -> bool:  # noqa: ARG001 - a 410 is a diagnosis, not a generic failure
    return status == 410


class DevshardHost:
    """One participant's devshard host. With an ``operator``, payload requests of escrows whose group holds the
    operator are signed (:mod:`indexer.sources.gonka.signing`); ``groups(escrow_id)`` gives an escrow's slot
    addresses when the caller does not pass them.

    Payloads are asked over the HTTP route first. A host that answers it with 410 ``X-Devshard-Error:
    http_session_retired`` is read over Connect RPC from then on (:mod:`indexer.sources.gonka.rpcpayloads`), and
    ``on_diagnosis`` hears once which route it speaks, or why neither serves its payloads."""

    def __init__(self, address: str, fetcher: Fetcher, *, operator: Operator | None = None,
                 groups: Callable[[str], Collection[str] | None] | None = None,
                 on_diagnosis: Diagnosis | None = None) -> None:
        self.address, self.http = address, fetcher
        self.operator, self.groups = operator, groups
        self.on_diagnosis = on_diagnosis
        self._versions: list[str] | None = None
        self.route = ROUTE_HTTP  # remembered for the host's life (one cycle): ROUTE_* above
        self.rpc = ConnectPayloads(fetcher, address, operator) if operator is not None else None
        self._said: set[str] = set()  # diagnoses already reported for this host

    def versions(self) -> list[str]:
        """Protocol versions the host runs, newest first (``/devshard/healthz``)."""
        if self._versions is None:
            data = self.http.get_json("/devshard/healthz")
            if not isinstance(data, list):  # a failure of this host: the group asks the next member
                raise FetchError(self.http.base_urls[0] + "/devshard/healthz",
                                 f"healthz: expected a JSON array, got a JSON {type(data).__name__}", transient=False)
            names = [v["name"] for v in data if isinstance(v, dict) and isinstance(v.get("name"), str) and v["name"]]
            # a name goes into every route of the host and into records: bounded (indexer.records.BOUNDS)
            if len(names) > MAX_VERSIONS or any(len(n) > NAME_LEN for n in names):
                raise FetchError(self.http.base_urls[0] + "/devshard/healthz", f"healthz: {len(names)} names, the "
                                 f"longest of {max(map(len, names))} characters: past the bounds ({MAX_VERSIONS} "
                                 f"names of {NAME_LEN})", transient=False)
            if not names:
                raise FetchError(self.http.base_urls[0] + "/devshard/healthz", "healthz: no protocol version named",
                                 transient=False)
            self._versions = sorted(names, key=version_key, reverse=True)  # v4.1 < v5 < v10
        return self._versions

    def shard_detail(self, version: str, escrow_id: str) -> dict:
        """The detail of ``escrow_id``: its nonce (the log's tip) and host stats. An honest host names the escrow asked
        for (``EscrowID`` is the route's id, gonka-ai/gonka devshard/cmd/devshardd/session/stats.go @ 836162fc); one
        naming another escrow, or none, fails here: its nonce and stats are another session's; so does a nonce no
        log reaches (not an integer in 0..2^63 - 1, what the nonces stored beside it hold)."""
        path = f"/devshard/{version}/stats/shards/{escrow_id}"
        data = self.http.get_json(path)
        named = data.get("escrow_id") if isinstance(data, dict) else None
        nonce = data.get("nonce") if isinstance(data, dict) else None
        if named is None or str(named) != str(escrow_id):
            why = f"answers for {'no escrow' if named is None else f'escrow {named}'}, asked for escrow {escrow_id}"
        elif nonce is not None and not (isinstance(nonce, (int, str)) and not isinstance(nonce, bool)
                                        and str(nonce).isascii() and str(nonce).isdigit() and int(nonce) < 1 << 63):
            why = f"nonce {str(nonce)[:40]!r} is no log's nonce (an integer in 0..2^63 - 1)"
        else:
            return data
        raise FetchError(self.http.base_urls[0] + path, f"shard detail: {why}", transient=False)

    def diff_pages(self, version: str, escrow_id: str, ranges: Sequence[tuple[int, int]]) -> list[list | FetchError]:
        """The diff-log pages ``first..last`` of each range, pipelined on one connection (Fetcher.get_json_many):
        one entry per range, its entries or the FetchError it ended with, returned rather than raised."""
        if any(last - first + 1 > PAGE_NONCES for first, last in ranges):
            raise ValueError(f"a diff page holds at most {PAGE_NONCES} nonces")
        pages = self.http.get_json_many(f"/devshard/{version}/sessions/{escrow_id}/diffs",
                                        [{"from": str(first), "to": str(last)} for first, last in ranges],
                                        [None] * len(ranges))
        return [page if isinstance(page, (list, FetchError)) else
                FetchError(self.http.base_urls[0], "diffs: expected a JSON array", transient=False) for page in pages]

    def payload(self, version: str, escrow_id: str, inference_id: int, *, validator: str, epoch: int,
                members: Collection[str] | None = None) -> str | None:
        """The stored response payload of one inference, as text (:func:`stored_response_payload`); None when the
        host stored none. Unsigned (refused by real hosts) unless an operator is configured and the escrow's group
        (``members``, else ``groups(escrow_id)``) holds it; then ``X-Validator-Address`` is the operator's address,
        not ``validator``. A body of another shape raises PayloadShapeError."""
        answer = self.payloads(version, escrow_id, [inference_id], validator=validator, epoch=epoch,
                               members=members)[0]
        if isinstance(answer, FetchError):
            raise answer
        return answer

    def payloads(self, version: str, escrow_id: str, inference_ids: Sequence[int], *, validator: str, epoch: int,
                 members: Collection[str] | None = None) -> list[str | None | FetchError]:
        """:meth:`payload` of each of ``inference_ids``, pipelined on one connection (Fetcher.get_json_many): one
        entry per id, its payload, None, or the FetchError (a PayloadShapeError for a body of another shape) it
        ended with, returned rather than raised."""
        path = f"/devshard/{version}/sessions/{escrow_id}/payloads"
        params = [{"inference_id": str(iid)} for iid in inference_ids]
        op = self.operator
        if members is None and op is not None and self.groups is not None:
            members = self.groups(str(escrow_id))
        signed = op is not None and op.signs_for(members)
        if self.route != ROUTE_HTTP:
            return self._rpc_payloads(version, escrow_id, inference_ids, epoch, signed)
        if signed:
            headers = [op.payload_headers(iid, epoch) for iid in inference_ids]
        else:
            stamp = str(time.time_ns())
            headers = [{"X-Validator-Address": validator, "X-Timestamp": stamp, "X-Epoch-Id": str(epoch)}
                       for _ in inference_ids]
        answers = self.http.get_json_many(path, params, headers, permanent=_gone)
        retired = next((a for a in answers if isinstance(a, FetchError) and a.status == 410), None)
        if retired is not None:
            if retired.headers.get(ERROR_HEADER) == HTTP_SESSION_RETIRED:
                self.route = ROUTE_RPC
                return self._rpc_payloads(version, escrow_id, inference_ids, epoch, signed)
            self._diagnose(f"payload route answered 410 without {ERROR_HEADER}: {HTTP_SESSION_RETIRED}: {retired}",
                           retired.url)
        out: list[str | None | FetchError] = []
        for iid, p, data in zip(inference_ids, params, answers):
            if signed and isinstance(data, FetchError) and data.status == 400 and "request timestamp" in str(data):
                # retries after long timeouts can outlive the host's 60 s window: sign afresh once
                data = self.http.get_json_many(path, [p], [op.payload_headers(iid, epoch)])[0]
            if isinstance(data, FetchError):
                out.append(data)
                continue
            try:
                out.append(stored_response_payload(data))
            except ValueError as exc:
                out.append(PayloadShapeError(f"{self.http.base_urls[0]}{path}?inference_id={iid}",
                                             f"payload response: {exc}", status=200, transient=False))
        return out

    def payload_url(self, version: str, escrow_id: str, inference_id: int) -> str:
        """Where this host serves one payload, over the route it speaks (for failure rows naming the source)."""
        if self.route == ROUTE_HTTP:
            return (f"{self.http.base_urls[0]}/devshard/{version}/sessions/{escrow_id}/payloads"
                    f"?inference_id={inference_id}")
        return f"{self.http.base_urls[0]}{rpc_base(version, escrow_id)}#{inference_id}"

    def _diagnose(self, message: str, url: str, transient: bool = False) -> None:
        """Report which payload route this host speaks, once per host and message: a net.failure row of source
        ``host:<address>``, so api.source_errors shows it beside the host's other failures."""
        if message in self._said:
            return
        self._said.add(message)
        log.info("host %s: %s", self.address, message)
        if self.on_diagnosis is not None:
            self.on_diagnosis(f"host:{self.address}", url, message, transient)

    def _rpc_payloads(self, version: str, escrow_id: str, inference_ids: Sequence[int], epoch: int,
                      signed: bool) -> list[str | None | FetchError]:
        """Payloads of a host whose HTTP route is retired, over Connect RPC (operator mode and a group holding the
        operator are needed: Attach is signed, and the host opens it only to members of the escrow)."""
        url = self.http.base_urls[0] + rpc_base(version, escrow_id)
        why = f"the HTTP payload route is retired (410 {ERROR_HEADER}: {HTTP_SESSION_RETIRED})"
        if self.rpc is None or self.route == ROUTE_NONE:
            if self.rpc is None:
                self.route = ROUTE_NONE
                reason = ("payloads are served only over Connect RPC, which needs operator mode "
                          "(GONKA_OPERATOR_ADDRESS, GONKA_OPERATOR_KEY_FILE)")
                self._diagnose(f"payload route: {why}; {reason}: this host's payloads stay unknown", url)
            else:
                reason = "and the host serves no Connect RPC"
            return [FetchError(url, f"{why}; {reason}", status=410, transient=False) for _ in inference_ids]
        if not signed:  # the host would refuse the Attach: the operator is not in this escrow's group
            return [FetchError(url, f"{why}; the operator is not in escrow {escrow_id}'s group", status=410,
                               transient=False) for _ in inference_ids]
        answers = self.rpc.payloads(version, escrow_id, inference_ids, epoch)
        failed = next((a for a in answers if isinstance(a, RpcNotServed)), None)
        if failed is not None:
            self.route = ROUTE_NONE
            self._diagnose(f"payload route: {why}, and the host serves no Connect RPC either ({failed}): this "
                           "host's payloads stay unknown", url)
        elif any(not isinstance(a, FetchError) for a in answers):
            self._diagnose(f"payload route: Connect RPC ({why})", url)
        else:
            refused = next((a for a in answers if "Attach" in str(a)), None)
            if refused is not None:
                self._diagnose(f"payload route: Connect RPC ({why}); {refused}", url, refused.transient)
        return answers

def stored_response_payload(data: Any) -> str | None:
    """The stored response payload in a host's answer to ``GET …/payloads?inference_id=``, as the text whose bytes
    the Finish's response_hash was taken over; None when the host stored none (JSON null). Hosts answer with
    ``validation.PayloadResponse`` {inference_id, prompt_payload, response_payload, executor_signature}
    (gonka-ai/gonka common/validation/payload_retrieval.go @ 41d3a072, written by HostManager.HandlePayloads in
    devshard/cmd/devshardd/session/manager.go @ df69efb7), whose payloads are Go ``[]byte``: encoding/json writes
    them in standard base64, so the JSON string is never the payload itself (the validator hashes the decoded bytes,
    devshard/cmd/devshardd/inference/validate.go @ c6c474aa). Raises ValueError for any other shape, so that a
    wrong text is never stored as the payload."""
    if not isinstance(data, dict) or "response_payload" not in data:
        raise ValueError("expected a JSON object with response_payload")
    encoded = data["response_payload"]
    if encoded is None:
        return None
    if not isinstance(encoded, str):
        raise ValueError(f"response_payload is a JSON {type(encoded).__name__}, expected a base64 string")
    try:
        raw = b64decode(encoded, "response_payload")
    except WireDecodeError:
        raise ValueError("response_payload is not standard base64 (Go's encoding of []byte)") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a text column cannot hold it, and any replacement would no longer hash to response_hash
        raise ValueError(f"the stored response payload is not UTF-8 text (byte {exc.start})") from None


Check = Callable[[str, list[dict]], None]  # (member, diffs it served): raises ValueError when they fail


class HostGroup:
    """The members of one escrow's group that can serve its log, primary first."""

    def __init__(self, escrow_id: str, version: str, members: Sequence[str],
                 host_for: Callable[[str], DevshardHost | None],
                 on_skip: Callable[[str, str, bool], None] | None = None, *, full_decode: bool = True) -> None:
        self.escrow_id, self.version = escrow_id, version
        # full_decode=False: pages hold only {nonce, entry} (the txs are decoded elsewhere, the roots by state_root)
        self.decode = (lambda e: diff_from_host_json(e, self.version)) if full_decode else diff_header_from_host_json
        self.members = list(dict.fromkeys(members))
        self.host_for, self.on_skip = host_for, on_skip
        self.bad: set[str] = set()
        self.primary: str | None = None
        self.t_fetch = self.t_decode = 0.0  # seconds spent in HTTP / in decoding (for the benchmark breakdown)

    def candidates(self) -> list[str]:
        alive = [m for m in self.members if m not in self.bad]
        if self.primary in alive:
            alive.remove(self.primary)
            alive.insert(0, self.primary)
        return alive

    def _skip(self, address: str, reason: str, transient: bool = True) -> None:
        self.bad.add(address)
        if self.primary == address:
            self.primary = None
        log.info("escrow %s: skipping host %s: %s", self.escrow_id, address, reason)
        if self.on_skip:
            self.on_skip(address, reason, transient)

    def _host(self, address: str) -> DevshardHost | None:
        try:
            host = self.host_for(address)
        except FetchError as exc:
            self._skip(address, f"no inference_url: {exc}", exc.transient)
            return None
        if host is None:
            self._skip(address, "no inference_url", False)
        return host

    def call(self, fn: Callable[[DevshardHost], Any]) -> tuple[Any, str]:
        """Run ``fn`` on the first member that answers; members that fail are skipped."""
        for address in self.candidates():
            host = self._host(address)
            if host is None:
                continue
            try:
                result = fn(host)
            except (FetchError, WireDecodeError, ValueError, KeyError, TypeError) as exc:
                self._skip(address, str(exc), getattr(exc, "transient", False))
                continue
            self.primary = address
            return result, address
        raise FetchError(f"escrow:{self.escrow_id}", "no member of the group answered", transient=True)

    def _decoded_page(self, host: DevshardHost, first: int, last: int) -> list[dict]:
        return self._decoded_pages(host, [(first, last)])[0]

    def _decoded_pages(self, host: DevshardHost, ranges: list[tuple[int, int]]) -> list[list[dict]]:
        """The pages of ``ranges`` (asked at once), decoded up to the first short one (the end of the log: later
        pages are left out); a page that failed raises its error."""
        t0 = time.perf_counter()
        pages = host.diff_pages(self.version, self.escrow_id, ranges)
        t1 = time.perf_counter()
        out: list[list[dict]] = []
        for (first, last), entries in zip(ranges, pages):
            if isinstance(entries, FetchError):
                raise entries
            page = [self.decode(e) for e in entries]
            for i, d in enumerate(page):
                if d["nonce"] != first + i:
                    raise WireDecodeError(f"diff page not contiguous: nonce {d['nonce']}, expected {first + i}")
            out.append(page)
            if len(page) < last - first + 1:
                break
        self.t_fetch += t1 - t0
        self.t_decode += time.perf_counter() - t1
        return out

    def _read(self, host: DevshardHost, first: int, last: int) -> tuple[list[dict], bytes | None]:
        """``first..last`` from one member, its pages asked for at once (it stops at the end of what it has), and the
        state root after its last diff (None without diffs): a root that does not decode fails this member."""
        ranges = [(start, min(last, start + PAGE_NONCES - 1)) for start in range(first, last + 1, PAGE_NONCES)]
        diffs = [diff for page in self._decoded_pages(host, ranges) for diff in page]
        return diffs, (state_root(diffs[-1]) if diffs else None)

    def _root(self, address: str, nonce: int, check: Check | None = None) -> bytes | None:
        """The witness ``address``'s state root after ``nonce``; None when it cannot give one (it is skipped when it
        fails, or when its diff fails ``check``: a witness is believed no more than a source)."""
        host = self._host(address)
        if host is None:
            return None
        try:
            page = self._decoded_page(host, nonce, nonce)
            if page and check is not None:
                check(address, page)
            return state_root(page[0]) if page else None
        except (FetchError, WireDecodeError, ValueError, KeyError, TypeError) as exc:
            self._skip(address, str(exc), getattr(exc, "transient", False))
            return None

    def _longer(self, source: str, first: int, last: int, got: int) -> bool:
        """Whether another member serves diffs past nonce ``got`` in ``first..last`` (``source`` stopped there short
        of the shard's tip): if so ``source`` is skipped as failing (one member cannot deny the others' log) and
        that member becomes the primary."""
        for other in [m for m in self.candidates() if m != source]:
            host = self._host(other)
            if host is None:
                continue
            try:
                page = self._decoded_page(host, got + 1, min(last, got + 1))
            except (FetchError, WireDecodeError, ValueError, KeyError, TypeError) as exc:
                self._skip(other, str(exc), getattr(exc, "transient", False))
                continue
            if page:
                self._skip(source, f"diffs {first}..{last}: served up to nonce {got}, short of the shard's tip, "
                                   f"while {other} serves nonce {got + 1}", False)
                self.primary = other
                return True
        return False

    def page(self, first: int, last: int, tip: int | None = None, check: Check | None = None) -> list[dict]:
        """Decoded diffs ``first..last`` (fewer at the end of the log), agreed by two members when possible.

        ``check(member, diffs)`` is called on each run as read, before any witness is asked, and on each witness's
        diff before its root is compared: a member whose diffs it raises on (a ValueError, e.g. a diff whose user
        signature does not recover to the escrow's creator) is skipped, naming the reason, and the run is read from
        the next. The comparison of roots between members follows, for what the check cannot decide (a history the
        user signed twice).

        ``last − first`` may span several pages: they are read from one member and only the last state root
        (:func:`~indexer.wire.diffs.state_root`) is checked against a witness. The root commits to the whole state
        reached by the log, so agreement at the end of a run of pages vouches for every page in it; on disagreement
        the whole run is read again from the member the tie-breaker sides with. A member that stops short of
        ``tip`` (the shard's nonce) while another serves the next diff is a failing member: the run is read from
        the other."""
        while True:
            (diffs, root), source = self.call(lambda h: self._read(h, first, last))
            got = diffs[-1]["nonce"] if diffs else first - 1
            if tip is not None and got < min(last, tip) and self._longer(source, first, last, got):
                continue
            if not diffs:
                return diffs
            if check is not None:
                try:
                    check(source, diffs)
                except (WireDecodeError, ValueError, KeyError, TypeError) as exc:
                    self._skip(source, f"diffs {first}..{diffs[-1]['nonce']}: {exc}", False)
                    continue
            tip = diffs[-1]["nonce"]
            witnesses = [m for m in self.candidates() if m != source]
            agreed = verdict = None
            for w in witnesses:
                other = self._root(w, tip, check)
                if other is None:
                    continue
                if agreed is None:
                    agreed = other == root
                    if agreed:
                        return diffs
                    first_witness = w
                    continue
                # a third member decides between the source and the first witness
                verdict = other == root
                if verdict:
                    self._skip(first_witness, f"diverging log at nonce {tip}", False)
                    return diffs
                self._skip(source, f"diverging log at nonce {tip}", False)
                break
            if agreed is None:
                return diffs  # no witness could answer: take the only log there is
            if verdict is None:
                # two members disagree and no third can decide: committing either log could archive a lie for
                # good (the cursor would move past it), so this escrow waits for a cycle with more members up
                raise FetchError(f"escrow:{self.escrow_id}", f"diverging logs at nonce {tip}: {source} and "
                                 f"{first_witness} disagree and no third member answered", transient=True)
            # source was wrong: loop, the next candidate serves the pages
