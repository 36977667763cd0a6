"""How a file load that stopped says so: where it stopped, and that a rerun of the same command resumes there."""
from __future__ import annotations


class IngestInterrupted(KeyboardInterrupt):
    """Ctrl-C during a load, with where it stopped: every line up to ``line`` of ``uri`` is committed."""

    def __init__(self, uri: str, line: int):
        super().__init__(f"stopped in {uri} after line {line}")
        self.uri, self.line = uri, line


class IngestFailed(RuntimeError):
    """A load stopped by the database or its host (the connection lost: the server restarted, the backend was
    terminated, the network dropped; the server's disk full; a typing process dying): says which file, and up to
    which line everything is committed, so the operator knows a rerun of the same command resumes there."""

    def __init__(self, uri: str, line: int, cause: BaseException, what: str = "the database connection was lost"):
        # the server's primary message only: its CONTEXT line quotes the row being copied
        reason = getattr(getattr(cause, "diag", None), "message_primary", None) or str(cause).split("\n", 1)[0]
        super().__init__(f"{uri}: {what} after line {line} was committed ({reason}); "
                         "run the same command again to resume from there")
        self.uri, self.line = uri, line
