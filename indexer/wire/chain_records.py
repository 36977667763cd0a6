"""Chain REST responses of an epoch → the ``epoch``, ``epoch_params`` and ``participant_epoch`` records (§2).

Shapes as mainnet serves them (captures in tests/cases/fixtures/mainnet/, README there): cosmos-sdk's grpc-gateway
marshals with the proto field names (``OrigName``) and emits zero values, so keys are snake_case except where the
proto itself names a field in camelCase (``epochPerformanceSummary``), 64-bit integers are decimal strings, 32-bit
ones JSON numbers, and ``inference.Decimal`` is ``{"value": "<int>", "exponent": <int32>}``.

Objects published by the chain (``validation_params`` and the parameter groups) are kept as published: the
decimals are not turned into numbers here (the database computes them exactly, ``fn.chain_decimal``).
"""
from __future__ import annotations

from typing import Any, Mapping

from indexer.records import ADDRESS_LEN, MAX_PARTICIPANTS, NAME_LEN, STATUS_LEN
from indexer.wire.errors import bounded
from indexer.wire.normalize import NormalizeError, parse_u64


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise NormalizeError(f"{what}: expected a JSON object, got {type(value).__name__}")
    return value


def _height(value: Any, what: str) -> int | None:
    """A block height; 0, empty and absent mean "not set" (proto3 zero value)."""
    if value in (None, ""):
        return None
    n = parse_u64(value, what)
    return n or None


# --------------------------------------------------------------------------- epoch_info

def epoch_info_parts(data: Mapping[str, Any]) -> tuple[int, int | None, int | None, int | None]:
    """``epoch_info`` → (current epoch, its PoC start height, epoch length, the node's block height).

    The real response is ``QueryEpochInfoResponse {block_height, params, latest_epoch}`` with ``params`` the whole
    module ``Params``, so the epoch length is ``params.epoch_params.epoch_length``. A flattened ``params`` (only the
    epoch params, as an older devnet served) is still read, so stored raw responses re-derive."""
    data = _obj(data, "epoch_info")
    latest = _obj(data.get("latest_epoch") or {}, "epoch_info.latest_epoch")
    epoch = parse_u64(latest.get("index"), "epoch_info.latest_epoch.index")
    start = _height(latest.get("poc_start_block_height"), "epoch_info.latest_epoch.poc_start_block_height")
    params = _obj(data.get("params") or {}, "epoch_info.params")
    epoch_params = params.get("epoch_params") if isinstance(params.get("epoch_params"), Mapping) else params
    length = _height(epoch_params.get("epoch_length"), "epoch_info.params.epoch_params.epoch_length")
    return epoch, start, length, _height(data.get("block_height"), "epoch_info.block_height")


# --------------------------------------------------------------------------- upgrade plans

def applied_plan_height(data: Mapping[str, Any], name: str) -> int | None:
    """``/cosmos/upgrade/v1beta1/applied_plan/{name}`` → the height the plan was applied at; None while it has not
    been applied (the module answers height "0")."""
    data = _obj(data, f"applied_plan/{name}")
    if "height" not in data:
        raise NormalizeError(f"applied_plan/{name}: no height in the answer")
    return _height(data["height"], f"applied_plan/{name}.height")


# --------------------------------------------------------------------------- root epoch group

def root_group(data: Mapping[str, Any], epoch: int) -> Mapping[str, Any]:
    """The root ``epoch_group_data`` object of ``epoch`` (checked: index matches, no model_id)."""
    group = _obj(_obj(data, "epoch_group_data").get("epoch_group_data"), "epoch_group_data")
    got = parse_u64(group.get("epoch_index"), "epoch_group_data.epoch_index")
    if got != epoch:
        raise NormalizeError(f"epoch_group_data/{epoch}: the chain answered epoch {got}")
    if group.get("model_id"):
        raise NormalizeError(f"epoch_group_data/{epoch}: expected the root group, got model {group['model_id']!r}")
    return group


def epoch_heights(group: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(start, end) of the epoch: PoC start block and ``last_block_height`` (0 while the epoch runs)."""
    return (_height(group.get("poc_start_block_height"), "poc_start_block_height"),
            _height(group.get("last_block_height"), "last_block_height"))


def epoch_record_from_group(group: Mapping[str, Any], observed_at: str | None = None) -> dict[str, Any]:
    start, end = epoch_heights(group)
    rec: dict[str, Any] = {"kind": "epoch", "epoch_index": parse_u64(group.get("epoch_index"), "epoch_index")}
    if start is not None:
        rec["start_height"] = start
    if end is not None:
        rec["end_height"] = end
    if observed_at:
        rec["observed_at"] = observed_at
    return rec


def sub_group_models(group: Mapping[str, Any]) -> list[str]:
    models = group.get("sub_group_models") or []
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise NormalizeError("sub_group_models: expected an array of model ids")
    return list(models)


def confirmation_weight_scales(group: Mapping[str, Any]) -> dict[str, Any] | None:
    """The root group's ``confirmation_weight_scales`` (chain v0.2.13 on) keyed by ``model_id``, each entry as
    published without its ``model_id``; ``{}`` when the chain publishes an empty list (the reward then pays on
    full weight), None when the field is absent (a chain before v0.2.13, or a capture that did not keep it)."""
    scales = group.get("confirmation_weight_scales")
    if scales is None:
        return None
    if not isinstance(scales, list):
        raise NormalizeError("confirmation_weight_scales: expected an array")
    out: dict[str, Any] = {}
    for entry in scales:
        entry = _obj(entry, "confirmation_weight_scales[]")
        model = entry.get("model_id")
        if not isinstance(model, str) or not model:
            raise NormalizeError("confirmation_weight_scales[]: model_id missing")
        out[model] = {k: v for k, v in entry.items() if k != "model_id"}
    return out


def epoch_params_record(epoch: int, group: Mapping[str, Any], params: Mapping[str, Any] | None,
                        params_height: int | None, params_exact: bool) -> dict[str, Any]:
    """``epoch_params``: the root group's ``validation_params``, ``total_weight`` and ``confirmation_weight_scales``
    (the epoch's own snapshot), and, from ``/params`` read at ``params_height``, ``bitcoin_reward_params``,
    ``devshard_escrow_params`` and ``delegation_params``."""
    rec: dict[str, Any] = {"kind": "epoch_params", "epoch_index": epoch}
    scales = confirmation_weight_scales(group)
    if scales is not None:
        rec["confirmation_weight_scales"] = scales
    vp = group.get("validation_params")
    rec["validation_params"] = dict(_obj(vp, "validation_params")) if vp is not None else None
    if rec["validation_params"] is None:
        del rec["validation_params"]
    if group.get("total_weight") not in (None, ""):
        rec["total_weight"] = parse_u64(group["total_weight"], "total_weight")
    if params is not None:
        inner = _obj(_obj(params, "params").get("params"), "params.params")
        for key in ("bitcoin_reward_params", "devshard_escrow_params", "delegation_params"):
            if inner.get(key) is not None:
                rec[key] = dict(_obj(inner[key], f"params.{key}"))
        if params_height is not None:
            rec["params_height"] = params_height
        rec["params_exact"] = bool(params_exact)
    return rec


# --------------------------------------------------------------------------- participants

def validation_weights(group: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """participant → {weight, confirmation_weight} from the root group's ``validation_weights``."""
    out: dict[str, dict[str, int]] = {}
    weights = group.get("validation_weights") or []
    if isinstance(weights, list) and len(weights) > MAX_PARTICIPANTS:  # each is read again, one request apiece
        raise NormalizeError(f"validation_weights: {len(weights)} entries, more than the {MAX_PARTICIPANTS} allowed")
    for w in weights:
        w = _obj(w, "validation_weights[]")
        addr = w.get("member_address")
        if not isinstance(addr, str) or not addr:
            raise NormalizeError("validation_weights[]: member_address missing")
        bounded(addr, "validation_weights[].member_address", ADDRESS_LEN)
        row: dict[str, int] = {}
        for key in ("weight", "confirmation_weight"):
            if w.get(key) not in (None, ""):
                row[key] = _signed(w[key], key)
        out[addr] = row
    return out


def raw_confirmation_weights(sub_groups: list[Mapping[str, Any]]) -> dict[str, int]:
    """participant → ``raw_confirmation_weight``: the ``confirmation_weight`` of the host's rows in the model
    sub-groups (``epoch_group_data/E?model_id=M``). The chain writes there the coefficient-weighted sum of the host's
    ML-node PoC weights over all its models (the same value in each sub-group), before confirmation PoC lowers the
    root row's ``confirmation_weight``: the raw total the reward rescales by (fn.reward_weight). When sub-groups
    disagree, the largest value is kept."""
    out: dict[str, int] = {}
    for group in sub_groups:
        for w in group.get("validation_weights") or []:
            w = _obj(w, "validation_weights[]")
            addr = w.get("member_address")
            if not isinstance(addr, str) or not addr or w.get("confirmation_weight") in (None, ""):
                continue
            value = _signed(w["confirmation_weight"], "confirmation_weight")
            out[addr] = max(value, out.get(addr, value))
    return out


def _signed(value: Any, what: str) -> int:
    """int64 fields (weights): a decimal string or number; the chain uses -1 for "not computed" in places."""
    if isinstance(value, str) and value.startswith("-") and value[1:].isascii() and value[1:].isdigit():
        return -int(value[1:])
    return parse_u64(value, what)


_PAID_WEIGHT = "participant_reward_weight"
_SUMMARY = ("inference_count", "missed_requests", "validated_inferences", "invalidated_inferences",
            "earned_coins", "rewarded_coins", "burned_coins")


def performance_summary(data: Mapping[str, Any], epoch: int, participant: str) -> dict[str, int]:
    """``epoch_performance_summary/{E}/{participant}`` (top-level key ``epochPerformanceSummary``, as the proto
    names the field) → its counters."""
    data = _obj(data, "epoch_performance_summary")
    inner = data.get("epochPerformanceSummary", data.get("epoch_performance_summary"))
    s = _obj(inner, "epochPerformanceSummary")
    if s.get("participant_id") not in (None, "", participant):
        raise NormalizeError(f"epoch_performance_summary/{epoch}/{participant}: answered for {s['participant_id']}")
    if s.get("epoch_index") not in (None, "") and parse_u64(s["epoch_index"], "epoch_index") != epoch:
        raise NormalizeError(f"epoch_performance_summary/{epoch}/{participant}: answered epoch {s['epoch_index']}")
    out = {k: parse_u64(s.get(k, 0), k) for k in _SUMMARY}  # emitted as "0" by the gateway; absent = 0 too
    # the weight the chain paid the epoch's reward on (field 11, gonka-ai/gonka inference-chain/proto/inference/
    # inference/epoch_performance_summary.proto @ 6f627e5f08b85be27fe064ae2eb25962cf51b85d): kept as served, beside
    # the weight the indexer derives (fn.reward_weight); absent on chains before it (unknown, not 0), and "0" in
    # summaries stored before it existed
    if s.get(_PAID_WEIGHT) not in (None, ""):
        out[_PAID_WEIGHT] = parse_u64(s[_PAID_WEIGHT], _PAID_WEIGHT)
    return out


def excluded_participants(data: Mapping[str, Any], epoch: int) -> dict[str, dict[str, Any]]:
    """``excluded_participants/{E}`` → participant → {excluded_reason, excluded_height}.

    ``QueryExcludedParticipantsResponse {repeated ExcludedParticipant items = 1;}`` (gonka-ai/gonka
    inference-chain/proto/inference/inference/query.proto @ 063eef1b1ad7f7149e10498e3444fe212ddf253f), not paginated;
    the gateway writes defaults, so ``items`` is always there (``[]`` for none; ``null`` is read as none too). An
    answer without it (``{}``, a proxy's own object) is refused: read as "none excluded" it would drop every
    exclusion of the epoch."""
    data = _obj(data, "excluded_participants")
    if "items" not in data:
        keys = ", ".join(sorted(map(str, data)))[:200] or "none"
        raise NormalizeError(f"excluded_participants/{epoch}: the answer has no items list (keys: {keys})")
    items = data["items"] or []
    if not isinstance(items, list):
        raise NormalizeError("excluded_participants.items: expected an array")
    if len(items) > MAX_PARTICIPANTS:
        raise NormalizeError(f"excluded_participants.items: {len(items)} entries, more than the {MAX_PARTICIPANTS} "
                             f"allowed")
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        item = _obj(item, "excluded_participants.items[]")
        addr = item.get("address")
        if not isinstance(addr, str) or not addr:
            raise NormalizeError("excluded_participants.items[]: address missing")
        bounded(addr, "excluded_participants.items[].address", ADDRESS_LEN)
        if item.get("epoch_index") not in (None, "") and parse_u64(item["epoch_index"], "epoch_index") != epoch:
            continue  # not this epoch's exclusion
        row: dict[str, Any] = {"excluded_reason": bounded(str(item.get("reason") or ""),
                                                          "excluded_participants.items[].reason", NAME_LEN)}
        height = _height(item.get("exclusion_block_height"), "exclusion_block_height")
        if height is not None:
            row["excluded_height"] = height
        out[addr] = row
    return out


# The inference module's enum ParticipantStatus by number (gonka-ai/gonka inference-chain/proto/inference/inference/
# participant.proto @ fdb0cb5087ccb820e1909371f6ec3dbcb36d11cc): the REST gateway writes the names; a number is
# mapped to its name, and a name or number not listed here is kept as the chain gave it (never refused).
PARTICIPANT_STATUSES = {0: "UNSPECIFIED", 1: "ACTIVE", 2: "INACTIVE", 3: "INVALID", 4: "RAMPING"}


def participant_status(data: Mapping[str, Any], address: str) -> str | None:
    """``participant/{address}`` → its ``status`` as the chain names it; None when the answer carries none."""
    p = _obj(_obj(data, "participant").get("participant"), "participant")
    if p.get("address") not in (None, "", address):
        raise NormalizeError(f"participant/{address}: answered for {str(p['address'])[:ADDRESS_LEN]}")
    status = p.get("status")
    if status is None or status == "":
        return None
    if isinstance(status, bool) or not isinstance(status, (int, str)):
        raise NormalizeError(f"participant/{address}: status is not an enum name or number")
    text = str(status).strip()
    if text.isascii() and text.isdigit():
        text = PARTICIPANT_STATUSES.get(int(text), text)
    return bounded(text, "participant.status", STATUS_LEN)


def participant_epoch_records(epoch: int, weights: Mapping[str, Mapping[str, int]],
                              summaries: Mapping[str, Mapping[str, int]],
                              excluded: Mapping[str, Mapping[str, Any]],
                              raw: Mapping[str, int] | None = None,
                              statuses: Mapping[str, Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One ``participant_epoch`` per participant named by any of the three sources, in address order; ``raw``:
    the sub-groups' raw confirmation weights (:func:`raw_confirmation_weights`); ``statuses``: participant →
    {status, status_height} as read at the epoch's end."""
    out = []
    raw = raw or {}
    statuses = statuses or {}
    for addr in sorted({*weights, *summaries, *excluded}):
        rec: dict[str, Any] = {"kind": "participant_epoch", "epoch_index": epoch, "participant": addr}
        rec.update(weights.get(addr, {}))
        if addr in raw:
            rec["raw_confirmation_weight"] = raw[addr]
        rec.update(summaries.get(addr, {}))
        rec.update(excluded.get(addr, {}))
        rec.update(statuses.get(addr, {}))
        out.append(rec)
    return out
