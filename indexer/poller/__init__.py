"""The poller: ingest from the Gonka endpoints into PostgreSQL (``indexer run``).

The cycle, epoch finality and the progress watchdog are described in :mod:`indexer.poller.cycle`; throughput
knobs (fetch threads, decode processes, batch sizes) are its module constants.

When a source is down for longer than the pruning window
-------------------------------------------------------
Chain state and host sessions of epoch E are deleted once the current epoch passes E + 2
(``DevshardPruningThreshold``); the indexer is the archive of record, so whatever was not captured by then is lost
for good:

* Epochs no cycle saw (the poller, or the chain, down for more than the window): everything about them is gone
  from the network (their creation events stay in ``tx_search``, but the escrows answer ``found:false``). The
  next cycle records each such epoch: ``net.epoch_state`` row ``final`` with ``reason = 'missed'`` and the number
  of escrows ``tx_search`` lists for it, a ``net.failure`` row (source ``epoch:<E>``) ``epoch pruned before the
  poller saw it``, and for each of those escrows a ``net.failure`` row and the same ``last_error`` on its
  ``escrow:<id>`` row of ``api.ingest_status``. (Epochs before the indexer's first cycle are not gaps.)
* Escrows the chain pruned between a cycle's listing and its fetch (the epoch ticked during the cycle): a
  ``net.failure`` row and ``last_error`` on ``escrow:<id>``: ``pruned before capture`` without stored rows,
  ``pruned before its log was final (captured up to nonce N)`` with some. One whose log reaches the nonce of its
  stored (REST-read) settlement lost nothing: it gets its ``escrow-final`` mark instead.
* Escrows partly captured (hosts down, chain up, or a log interrupted): the rows up to the ``escrow:<id>`` cursor
  are kept; the tail after it, the final host stats and the ``escrow-final`` mark are missing. The ``escrow:<id>``
  row of ``api.ingest_status`` keeps its old cursor, its ``last_error`` and a growing ``lag_seconds``; the watchdog's
  ``stalled_cycles`` stop growing once the escrow is pruned (no source position any more).
* A 0/0 Finish whose response payload no member of its group served is stored without it (``refusal_kind``
  ``unknown``) and asked again in later cycles, whether or not its escrow was pruned from the chain since (the
  hosts' stores are asked, not the chain); after the last allowed attempt it is given up and shown as such in
  ``api.awaited_payloads`` and ``api.source_errors`` (:mod:`indexer.poller.awaited`).
* Host epoch stats not read before pruning are missing (``host_epoch_stats`` has no row for those participants).
* An epoch that leaves the window while ``settling`` becomes ``final`` with ``reason = 'pruned'``; its escrows are
  listed from ``tx_search`` (so ``escrows`` counts the ones never captured too), and each escrow without an
  ``escrow-final`` cursor gets a ``net.failure`` row and ``last_error`` ``epoch <E> pruned before escrow was
  final``; the ``epoch:<E>`` row's ``last_error`` says how many. So every gap is visible in
  ``api.ingest_status`` (and the ``net.epoch_state`` row says ``pruned`` with ``escrows_final < escrows``).
* A cycle that fails (no chain node answers, the database drops the connection) records ``cycle failed: …`` on
  ``chain`` (``last_error``) and in ``net.failure``, through a fresh connection when the old one is gone; what it
  committed stays (rows and cursors commit together) and the next cycle resumes from the cursors.

docs/reliability.md ("The poller", "How it is tested") has the guarantees and the fault-injection suite that checks
them; docs/scale.md ("Several pollers") how pollers share one database (:mod:`indexer.poller.leases`).

Nothing is retried from an archive node (public nodes do not serve archive heights, §5.5); replay and rules run on
what was captured, and the replay's tallies beside the network's ``host_stats`` (``api.host_stats_check``) show
where a log is short.
"""
__all__ = ["PollSummary", "poll_once"]


def __getattr__(name: str):
    # Imported on first use, not with the package: the decode processes' forkserver (indexer.poller.decode) would
    # otherwise import the whole poller (httpx, the commit pipeline, leases) before its first diff.
    if name in __all__:
        from indexer.poller import cycle
        return getattr(cycle, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
