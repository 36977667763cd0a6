"""Proof checks a third party can run on devshard evidence without trusting any host or this indexer's database:
signature recovery (:mod:`.signatures`), the state root (:mod:`.state_root`), the session rules (:mod:`.apply`), a
served diff (:mod:`.diff`) and the settlement message (:mod:`.settlement`); the evidence bundle (:mod:`.bundle`), its
three checks (:mod:`.evidence`) and the standalone verifier ``python -m indexer.verify FILE``. Pure functions: stdlib,
``coincurve`` and nothing from the database, poller or load code."""
