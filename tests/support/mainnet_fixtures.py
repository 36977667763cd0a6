"""The mainnet captures of tests/cases/fixtures/mainnet/ (sources in its README), and a JSON structure comparison."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "cases" / "fixtures" / "mainnet"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_bytes())


def raw(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def epoch_info_shape() -> dict:
    """``QueryEpochInfoResponse {block_height (int64), params (Params), latest_epoch (Epoch)}``: no capture exists;
    built from the proto (query.proto, epoch.proto) around the captured Params (README: epoch_info)."""
    return {"block_height": "5660000", "params": load("params_e366.json")["params"],
            "latest_epoch": {"index": "367", "poc_start_block_height": "5648400"}}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def structure_diff(real: Any, ours: Any, path: str = "$") -> list[str]:
    """Where ``ours`` differs in structure from ``real``: missing or extra keys, another JSON type, another
    nesting. Array elements are compared element-wise against the first real element (an empty array on either
    side says nothing about its elements)."""
    kr, ko = _kind(real), _kind(ours)
    if kr != ko:
        return [f"{path}: {ko} where mainnet has {kr}"]
    out: list[str] = []
    if kr == "object":
        for key in real.keys() - ours.keys():
            out.append(f"{path}.{key}: missing")
        for key in ours.keys() - real.keys():
            out.append(f"{path}.{key}: not in the mainnet response")
        for key in real.keys() & ours.keys():
            out += structure_diff(real[key], ours[key], f"{path}.{key}")
    elif kr == "array" and real and ours:
        for i, item in enumerate(ours):
            out += structure_diff(real[0], item, f"{path}[{i}]")
    return sorted(out)
