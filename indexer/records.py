"""The normalized NDJSON record kinds (interface.md §2) as data: table, key, typed fields.

Everything else in the load stage (DDL checks, the typing/validation SQL, upserts, export) is generated from
this table, so adding a field or a kind is a one-line change here plus a migration.
"""
from __future__ import annotations

from dataclasses import dataclass

# Field types. Each maps a JSON value to a PostgreSQL column, with validation done set-based in SQL.
ID = "id"            # escrow_id: string or integer -> text
U64 = "u64"          # non-negative integer (number or decimal string) that fits bigint
U64N = "u64n"        # any u64 -> numeric(20,0)
I64 = "i64"          # signed 64-bit (unix times)
U32 = "u32"          # slot ids, small counters -> integer
BOOL = "bool"
STR = "str"
HEX = "hex"          # lowercase hex string
STRS = "strs"        # array of strings -> text[]
VOTES = "votes"      # [{voter_slot, accept}] -> normalized jsonb
REASON = "reason"    # timeout reason -> 'refused' | 'execution'
TS = "ts"            # ISO-8601 string or unix seconds -> timestamptz
OBJ = "obj"          # a JSON object kept as published (chain parameter groups) -> jsonb

PG_TYPES = {ID: "text", U64: "bigint", U64N: "numeric(20,0)", I64: "bigint", U32: "integer", BOOL: "boolean",
            STR: "text", HEX: "text", STRS: "text[]", VOTES: "jsonb", REASON: "text", TS: "timestamptz",
            OBJ: "jsonb"}


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    required: bool = False
    max_len: int | None = None     # characters of a string (of each string of an array); None: the line's bound only
    max_items: int | None = None   # entries of an array


# What one record may hold: every value a peer or a file gives is bounded before it is stored or used (a longer
# value quarantines its line with the field, its length and the bound; docs/interface.md "Bounds"). Lines themselves
# are bounded by indexer.sources.ndjson.MAX_LINE_BYTES (the blobs: a payload, a diff's bytes, a transaction).
MAX_SLOTS = 256        # slots of an escrow, votes of a tx: the protocol's validator bitmap holds 128 (Bitmap128)
MAX_PARTICIPANTS = 100_000  # participants of one epoch's group (mainnet: a few hundred), each read apiece
NAME_LEN = 256         # a model id, a protocol version, an exclusion reason
ADDRESS_LEN = 128      # a bech32 address (gonka1… is 44 characters, a contract's 64)
HEX_LEN = 512          # a hash (64 hex digits), a signature (128-130), a state root
URL_LEN = 2048         # the host a diff was served by
STATUS_LEN = 64        # a participant status as the chain names it (ACTIVE, INACTIVE, …, or one it adds later)
ARGS = 256             # model_args entries
ARG_LEN = 4096         # characters of one model argument
BOUNDS: dict[str, tuple[int | None, int | None]] = {  # field -> (max_len, max_items); HEX fields: HEX_LEN
    "model_id": (NAME_LEN, None), "model": (NAME_LEN, None), "protocol_version": (NAME_LEN, None),
    "excluded_reason": (NAME_LEN, None), "status": (STATUS_LEN, None), "participant": (ADDRESS_LEN, None),
    "grantee": (ADDRESS_LEN, None),
    "creator": (ADDRESS_LEN, None), "settler": (ADDRESS_LEN, None), "pub_key": (NAME_LEN, None),
    "source_host": (URL_LEN, None), "slots": (ADDRESS_LEN, MAX_SLOTS), "model_args": (ARG_LEN, ARGS),
    "votes": (None, MAX_SLOTS), "state_root_and_protocol_version": (HEX_LEN + NAME_LEN, None),
}


def _bounded(f: Field) -> Field:
    max_len, max_items = BOUNDS.get(f.name, (HEX_LEN if f.type == HEX else None, None))
    return Field(f.name, f.type, f.required, max_len, max_items)


@dataclass(frozen=True)
class Kind:
    name: str
    table: str                     # in schema rec
    key: tuple[str, ...]
    fields: tuple[Field, ...]      # key fields first
    slot_fields: tuple[str, ...] = ()   # must be < len(escrow.slots) when the escrow is known
    scope: str = "escrow"          # 'escrow' (dirties an escrow) or 'epoch' (dirties an epoch)

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.fields]

    @property
    def value_columns(self) -> list[str]:
        return [c for c in self.columns if c not in self.key]

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)


def _f(spec: str) -> tuple[Field, ...]:
    """'escrow_id:id! diff_nonce:u64!' -> Fields; '!' marks required."""
    out = []
    for token in spec.split():
        name, typ = token.split(":")
        out.append(_bounded(Field(name, typ.rstrip("!"), typ.endswith("!"))))
    return tuple(out)


_TX = "escrow_id:id! inference_id:u64! "
_TX_TAIL = " tx_index:u32 protocol_version:str"

KINDS: dict[str, Kind] = {k.name: k for k in [
    Kind("epoch", "epoch", ("epoch_index",),
         _f("epoch_index:u64! start_height:u64 end_height:u64 observed_at:ts"), scope="epoch"),
    Kind("model_snapshot", "model_snapshot", ("epoch_index", "model_id"),
         _f("epoch_index:u64! model_id:str! model_args:strs!"), scope="epoch"),
    Kind("escrow", "escrow", ("escrow_id",),
         _f("escrow_id:id! epoch_index:u64! model_id:str! slots:strs! vote_threshold_factor:u32 "
            "validation_rate:u32 max_model_len:u64 protocol_version:str settled:bool creator:str amount:u64n "
            "token_price:u64n create_devshard_fee:u64n fee_per_nonce:u64n inference_seal_grace_nonces:u64 "
            "inference_seal_grace_seconds:u64 auto_seal_every_n_nonces:u64 max_nonce:u64 refusal_timeout:i64 "
            "execution_timeout:i64")),
    Kind("start", "start_tx", ("escrow_id", "inference_id"),
         _f(_TX + "diff_nonce:u64! prompt_hash:hex model:str input_length:u64 max_tokens:u64 started_at:i64"
            + _TX_TAIL)),
    Kind("confirm_start", "confirm_start_tx", ("escrow_id", "inference_id"),
         _f(_TX + "diff_nonce:u64! confirmed_at:i64" + _TX_TAIL)),
    Kind("finish", "finish_tx", ("escrow_id", "inference_id"),
         _f(_TX + "diff_nonce:u64! executor_slot:u32! input_tokens:u64! output_tokens:u64! response_hash:hex "
            "response_payload:str" + _TX_TAIL), slot_fields=("executor_slot",)),
    Kind("validation", "validation_tx", ("escrow_id", "inference_id", "validator_slot"),
         _f(_TX + "validator_slot:u32! diff_nonce:u64! valid:bool!" + _TX_TAIL), slot_fields=("validator_slot",)),
    Kind("validation_vote", "validation_vote_tx", ("escrow_id", "inference_id", "voter_slot"),
         _f(_TX + "voter_slot:u32! diff_nonce:u64! vote_valid:bool!" + _TX_TAIL), slot_fields=("voter_slot",)),
    Kind("timeout", "timeout_tx", ("escrow_id", "inference_id"),
         _f(_TX + "diff_nonce:u64! reason:reason! votes:votes!" + _TX_TAIL), slot_fields=("votes",)),
    Kind("error_miss", "error_miss_tx", ("escrow_id", "inference_id"),
         _f(_TX + "diff_nonce:u64! votes:votes!" + _TX_TAIL), slot_fields=("votes",)),
    Kind("host_stats", "host_stats", ("escrow_id", "slot_id"),
         _f("escrow_id:id! slot_id:u32! missed:u64 invalid:u64 cost:u64n required_validations:u64 "
            "completed_validations:u64"), slot_fields=("slot_id",)),
    Kind("host_epoch_stats", "host_epoch_stats", ("epoch_index", "participant"),
         _f("epoch_index:u64! participant:str! missed:u64 invalid:u64 cost:u64n required_validations:u64 "
            "completed_validations:u64 escrow_count:u64"), scope="epoch"),
    # what verification needs (indexer.verify): each diff as served, and the settlement transaction
    Kind("signed_diff", "signed_diff", ("escrow_id", "nonce"),
         _f("escrow_id:id! nonce:u64! content:str! user_sig:hex post_state_root:hex state_hash:hex source_host:str")),
    Kind("settlement", "settlement", ("escrow_id",),
         _f("escrow_id:id! tx_hash:hex height:u64 settler:str state_root:hex rest_hash:hex nonce:u64 fees:u64n "
            "state_root_and_protocol_version:str host_stats:obj signatures:obj msg:str tx_raw:str")),
    # each participant's warm keys (authz grantees for MsgStartInference): the keys hosts sign devshard messages with;
    # an empty grantee records a participant whose grants were read and listed none
    Kind("warm_key", "warm_key", ("epoch_index", "participant", "grantee"),
         _f("epoch_index:u64! participant:str! grantee:str! pub_key:str read_height:u64 read_exact:bool"),
         scope="epoch"),
    # the epoch's own parameter snapshot and per-participant outcome (chain REST; indexer.wire.chain_records)
    Kind("epoch_params", "epoch_params", ("epoch_index",),
         _f("epoch_index:u64! validation_params:obj bitcoin_reward_params:obj devshard_escrow_params:obj "
            "total_weight:u64 params_height:u64 params_exact:bool confirmation_weight_scales:obj "
            "delegation_params:obj"), scope="epoch"),
    Kind("participant_epoch", "participant_epoch", ("epoch_index", "participant"),
         _f("epoch_index:u64! participant:str! weight:i64 confirmation_weight:i64 inference_count:u64 "
            "missed_requests:u64 validated_inferences:u64 invalidated_inferences:u64 earned_coins:u64n "
            "rewarded_coins:u64n burned_coins:u64n excluded_reason:str excluded_height:u64 "
            "raw_confirmation_weight:i64 status:str status_height:u64"), scope="epoch"),
]}

# Load order inside a batch: escrows before the txs that are checked against their slots.
LOAD_ORDER = ["epoch", "model_snapshot", "escrow", "start", "confirm_start", "finish", "validation",
              "validation_vote", "timeout", "error_miss", "host_stats", "signed_diff", "settlement", "host_epoch_stats",
              "epoch_params", "participant_epoch", "warm_key"]
assert set(LOAD_ORDER) == set(KINDS)
