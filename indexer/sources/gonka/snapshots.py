"""Everything the chain publishes about one epoch, captured as normalized records, with every failed read named.

:func:`capture_epoch` reads, for epoch E:

* ``epoch_group_data/E`` (the root group): the ``epoch`` record (start = PoC start block, end =
  ``last_block_height`` once the epoch has ended), the epoch's own ``validation_params`` and ``total_weight``, the
  participants' ``weight`` and ``confirmation_weight``, ``confirmation_weight_scales``, and the list of model
  sub-groups;
* ``epoch_group_data/E?model_id=M`` for each model: ``model_snapshot`` (the governance ``model_args``) and the
  hosts' raw (coefficient-weighted, pre-confirmation) ``confirmation_weight``, which the reward rescales by;
* ``/params`` as of a height inside the epoch (its last block once it ended; ``x-cosmos-block-height``):
  ``bitcoin_reward_params`` and ``devshard_escrow_params``. Governance changes live params later (proposal 96
  raised invalidation_h_threshold after epoch 366 had ended), so live values are only a stand-in: when the node
  has pruned that height, or the epoch is still running, the live values are stored with the height they were
  read at and ``params_exact = false``, and a later capture of an ended epoch replaces them where it can (an
  exact snapshot is never replaced by an inexact one: the load's upsert keeps it, indexer.load.statements);
* once the epoch has ended: ``excluded_participants/E`` and ``epoch_performance_summary/E/{participant}`` for
  every participant of the root group or of the exclusions: ``participant_epoch`` records, with each one's
  ``participant/{address}.status`` as of the end height, as the chain names it (a pruned height leaves it unknown:
  the status changes within an epoch, so today's cannot stand in); and each root-group
  participant's warm keys (``grantees_by_message_type/{participant}/…MsgStartInference``): ``warm_key`` records,
  the keys its host signed the epoch's devshard messages with (what verification accepts besides the address).
  They are read as of the epoch's end height (``read_height``, ``read_exact = true``); once no node serves it
  (pruned, or answered as of another height), today's grants stand in (``read_exact = false``, no height), which
  verification does not count as proof. When a node failed otherwise beside one that pruned the height (it may be
  the archive node, down for now), a stand-in is stored and its read recorded as failed too, so the epoch is not
  final before that node was asked again. A participant the chain answered with an empty list gets one record with
  an empty grantee (captured, none granted); any error answer, a 404 included, is a failed read and no record.

Nothing here raises for a failed read: each becomes a :class:`SnapshotFailure` (epoch, model or participant, URL,
error) so the caller can log it and show it in ``api.ingest_status``; what could be read is still returned.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator
from urllib.parse import quote

from indexer.sources.gonka import identity
from indexer.sources.gonka.chain import ChainRest, HeightPruned
from indexer.sources.gonka.http import FetchError
from indexer.wire import chain_records as cr
from indexer.wire.normalize import NormalizeError, model_snapshot_record

READ_ERRORS = (FetchError, NormalizeError)


@dataclass(frozen=True)
class SnapshotFailure:
    epoch: int
    what: str                     # 'root', 'model', 'params', 'excluded', 'participant', 'status', 'warm_keys'
    url: str
    error: str
    transient: bool
    model_id: str | None = None
    participant: str | None = None

    @property
    def host(self) -> str | None:
        """The node that failed to answer (host:port of the URL)."""
        from urllib.parse import urlsplit

        return urlsplit(self.url).netloc or None

    @property
    def source(self) -> str:
        """The ``api.ingest_status`` source of this read: ``snapshot:<E>:<what>[:<model or participant>]``."""
        subject = self.model_id or self.participant
        return f"snapshot:{self.epoch}:{self.what}" + (f":{subject}" if subject else "")


@dataclass
class EpochCapture:
    epoch: int
    records: list[dict[str, Any]] = field(default_factory=list)
    failures: list[SnapshotFailure] = field(default_factory=list)
    succeeded: list[str] = field(default_factory=list)  # sources read fine (their earlier errors are resolved)
    start_height: int | None = None
    end_height: int | None = None
    absent: SnapshotFailure | None = None  # the chain answered 404 for the root group (no such epoch group, nothing
                                           # captured): the read, a failure only where the caller knows the epoch
                                           # exists (indexer.poller.finality.Epochs.load_snapshot)

    @property
    def complete(self) -> bool:
        return not self.failures


Mapper = Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]]


def capture_epoch(chain: ChainRest, epoch: int, *, ended: bool, mapper: Mapper = map) -> EpochCapture:
    """The normalized records of ``epoch`` and the reads that failed. ``ended``: the epoch is before the current
    one (its end height, performance summaries and exclusions exist). ``mapper``: a ``map`` to run the
    per-participant reads with (e.g. a thread pool's)."""
    out = EpochCapture(epoch)

    def failed(what: str, exc: Exception, url: str, **subject: str) -> None:
        out.failures.append(SnapshotFailure(epoch, what, getattr(exc, "url", "") or url, str(exc),
                                            bool(getattr(exc, "transient", False)), **subject))

    def ok(what: str, subject: str | None = None) -> None:
        out.succeeded.append(f"snapshot:{epoch}:{what}" + (f":{subject}" if subject else ""))

    root_url = f"epoch_group_data/{epoch}"
    try:
        group = cr.root_group(chain.epoch_group_data(epoch), epoch)
        models = cr.sub_group_models(group)
        weights = cr.validation_weights(group)
        cr.confirmation_weight_scales(group)  # malformed scales fail the root read here, not the params record
        epoch_rec = cr.epoch_record_from_group(group)
    except FetchError as exc:
        if exc.status == 404:  # no group for this epoch: before genesis, not formed yet, or a node missing it
            out.absent = SnapshotFailure(epoch, "root", exc.url or root_url, str(exc), True)
        else:
            failed("root", exc, root_url)
        return out
    except NormalizeError as exc:
        failed("root", exc, root_url)
        return out
    ok("root")
    out.records.append(epoch_rec)
    out.start_height, out.end_height = epoch_rec.get("start_height"), epoch_rec.get("end_height")

    sub_groups = []
    for model_id in models:
        try:
            data = chain.epoch_group_data(epoch, model_id)
            snap = model_snapshot_record(data)
            if snap is None:
                raise NormalizeError(f"epoch_group_data/{epoch}?model_id={model_id}: no model snapshot")
        except READ_ERRORS as exc:
            failed("model", exc, f"{root_url}?model_id={model_id}", model_id=model_id)
            continue
        ok("model", model_id)
        out.records.append(snap)
        if isinstance(data, dict) and isinstance(data.get("epoch_group_data"), dict):
            sub_groups.append(data["epoch_group_data"])

    out.records.append(_epoch_params(chain, epoch, group, ended, out, failed, ok))
    if ended:
        raw = {}
        try:
            raw = cr.raw_confirmation_weights(sub_groups)
        except NormalizeError as exc:
            failed("model", exc, f"{root_url}?model_id=*")
        out.records.extend(_participants(chain, epoch, weights, raw, out.end_height, mapper, failed, ok))
        out.records.extend(_warm_keys(chain, epoch, sorted(weights), out.end_height, mapper, failed, ok))
    return out


def _stand_in(exc: HeightPruned, what: str) -> FetchError | None:
    """The failure to record beside a live stand-in: None when every node that answered said the height is gone;
    when another node failed otherwise (down, 5xx: perhaps the archive node), a transient failure, so the read
    stays open (the epoch settling) and a later capture reads the height there and replaces the stand-in."""
    if exc.failed is None:
        return None
    return FetchError(exc.failed.url, f"{what} as of height {exc.height}: live values stand in (not served by "
                      f"{exc}; another node failed: {exc.failed}); asked again", transient=True)


def _grants(chain: ChainRest, addr: str, at: int | None) -> tuple[list[dict], int | None, bool, FetchError | None]:
    """(grants, read height, exact, still to read): as of ``at`` (the epoch's end) while a node serves it, else the
    live grants with no height (a live read's height changes every cycle, and the record must not), and the
    failure to record when a node that may keep the height failed (:func:`_stand_in`)."""
    retry = None
    if at is not None:
        try:
            return identity.grantees_at(chain, addr, at)[0], at, True, None
        except HeightPruned as exc:
            retry = _stand_in(exc, "grants")
    return identity.grantees_at(chain, addr, None)[0], None, False, retry


def _warm_keys(chain: ChainRest, epoch: int, participants: list[str], at: int | None, mapper: Mapper, failed,
               ok) -> list[dict]:
    """Each participant's grants as ``warm_key`` records; a participant read with none gets one record with an
    empty grantee, so verification tells "captured, no grants" from "not captured" (a failed read: no record)."""
    def one(addr: str):
        try:
            return addr, _grants(chain, addr, at), None
        except READ_ERRORS as exc:
            return addr, None, exc

    out = []
    for addr, read, exc in mapper(one, participants):
        if exc is not None:
            failed("warm_keys", exc, f"grantees_by_message_type/{addr}", participant=addr)
            continue
        listed, height, exact, retry = read
        if retry is None:
            ok("warm_keys", addr)
        else:
            failed("warm_keys", retry, f"grantees_by_message_type/{addr}", participant=addr)
        base = {"kind": "warm_key", "epoch_index": epoch, "participant": addr, "read_height": height,
                "read_exact": exact}
        grants = [{**base, "grantee": g["address"], "pub_key": identity.public_key_text(g.get("pub_key"))}
                  for g in listed if isinstance(g.get("address"), str) and g["address"]]
        out.extend(grants or [{**base, "grantee": ""}])
    return out


def _epoch_params(chain: ChainRest, epoch: int, group, ended: bool, out: EpochCapture, failed, ok) -> dict:
    at = out.end_height if ended else None
    params = height = None
    exact = False
    retry = None
    try:
        try:
            params, height = chain.params(at)
            exact = at is not None
        except HeightPruned as exc:
            retry = _stand_in(exc, "params")
            params, height = chain.params(None)  # the live values stand in, marked inexact
        rec = cr.epoch_params_record(epoch, group, params, height, exact)
    except READ_ERRORS as exc:
        failed("params", exc, "params")
        return cr.epoch_params_record(epoch, group, None, None, False)
    if retry is None:
        ok("params")
    else:
        failed("params", retry, "params")
    return rec


def _status(chain: ChainRest, addr: str, at: int | None) -> dict:
    """{status, status_height} of ``addr`` as of the epoch's end height ``at``; empty when that height is gone from
    every node (the status changes within an epoch and is reset at the next one's start, so today's value cannot
    stand in: unknown, not ACTIVE) or the epoch has no end height yet. Raises READ_ERRORS for a failed read."""
    if at is None:
        return {}
    try:
        data, served, _ = chain.get_at(f"/participant/{quote(addr, safe='')}", at)
    except HeightPruned:
        return {}
    status = cr.participant_status(data, addr)
    return {} if status is None else {"status": status, "status_height": served}


def _participants(chain: ChainRest, epoch: int, weights, raw, at: int | None, mapper: Mapper, failed,
                  ok) -> list[dict]:
    excluded: dict = {}
    try:
        excluded = cr.excluded_participants(chain.excluded_participants(epoch), epoch)
        ok("excluded")
    except READ_ERRORS as exc:
        failed("excluded", exc, f"excluded_participants/{epoch}")

    def one(addr: str):
        try:
            got = addr, cr.performance_summary(chain.epoch_performance_summary(epoch, addr), epoch, addr), None
        except READ_ERRORS as exc:
            got = addr, None, exc
        try:
            return (*got, _status(chain, addr, at), None)
        except READ_ERRORS as exc:
            return (*got, {}, exc)

    summaries, statuses = {}, {}
    for addr, summary, exc, status, status_exc in mapper(one, sorted({*weights, *excluded})):
        if exc is not None:
            failed("participant", exc, f"epoch_performance_summary/{epoch}/{addr}", participant=addr)
        else:
            ok("participant", addr)
            summaries[addr] = summary
        if status_exc is not None:
            failed("status", status_exc, f"participant/{addr}", participant=addr)
        else:
            ok("status", addr)
            statuses[addr] = status
    return cr.participant_epoch_records(epoch, weights, summaries, excluded, raw, statuses)
