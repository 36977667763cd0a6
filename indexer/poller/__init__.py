"""The poller: ingest from the Gonka endpoints into PostgreSQL (``indexer run``)."""
from indexer.poller.cycle import PollSummary, poll_once

__all__ = ["PollSummary", "poll_once"]
