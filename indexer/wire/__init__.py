"""Pure (stdlib-only) wire layer: protobuf codec, per-version devshard schemas, JSON → records."""

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
from indexer.wire.schemas import SCHEMAS, VERSIONS, schema_for

__all__ = [
    "SCHEMAS",
    "VERSIONS",
    "DiffRecords",
    "NormalizeError",
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
    "normalize_diffs",
    "schema_for",
]
