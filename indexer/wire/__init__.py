"""Wire layer: per-version devshard tables as protobuf message classes (official ``protobuf``), JSON → records."""

from indexer.wire.diffs import decode_diff, decode_tx, diff_from_host_json, diff_to_host_json, encode_diff, encode_tx
from indexer.wire.normalize import (
    DiffRecords,
    NormalizeError,
    dumps_record,
    escrow_record,
    host_epoch_stats_record,
    host_stats_records,
    model_snapshot_record,
    normalize_diffs,
)
from indexer.wire.protobuf import WireDecodeError, WireEncodeError
from indexer.wire.schemas import SCHEMAS, VERSIONS, UnknownProtocolVersion, newest, schema_for, version_key

__all__ = [
    "SCHEMAS",
    "VERSIONS",
    "DiffRecords",
    "NormalizeError",
    "UnknownProtocolVersion",
    "WireDecodeError",
    "WireEncodeError",
    "decode_diff",
    "decode_tx",
    "diff_from_host_json",
    "diff_to_host_json",
    "dumps_record",
    "encode_diff",
    "encode_tx",
    "escrow_record",
    "host_epoch_stats_record",
    "host_stats_records",
    "model_snapshot_record",
    "newest",
    "normalize_diffs",
    "schema_for",
    "version_key",
]
