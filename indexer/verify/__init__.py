"""Proof checks a third party can run on devshard evidence without trusting any host or this indexer's database:
signature recovery (:mod:`.signatures`), the state root (:mod:`.state_root`) and the settlement message
(:mod:`.settlement`). Pure functions: stdlib, ``coincurve`` and nothing from the database, poller or load code."""
