"""Shared by the partition tests: a three-epoch database (loaded, replayed, rules run) and the relations a JSON
EXPLAIN plan reads."""
from __future__ import annotations

import pytest

from indexer.synth import generate, write_ndjson
from tests.support.helpers import ingest

EPOCHS = (400, 401, 402)


@pytest.fixture
def three_epochs(db_url, tmp_path):
    path = tmp_path / "synth.ndjson"
    write_ndjson(str(path), generate(seed=3, escrows=4, inferences=120, epochs=len(EPOCHS), first_epoch=EPOCHS[0],
                                     mix="adversarial"))
    ingest(db_url, path, rules=True)
    return db_url


def plan_relations(plan) -> list[str]:
    """Every relation a JSON plan names, as schema.name, in plan order."""
    out = []
    if isinstance(plan, dict):
        if "Relation Name" in plan:
            out.append(f"{plan.get('Schema', '')}.{plan['Relation Name']}")
        for value in plan.values():
            out += plan_relations(value)
    elif isinstance(plan, list):
        for value in plan:
            out += plan_relations(value)
    return out


def plan_partitions(plan) -> set[str]:
    """The partitions (schema `part`) a JSON plan names, without the schema."""
    return {r.removeprefix("part.") for r in plan_relations(plan) if r.startswith("part.")}
