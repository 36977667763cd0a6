"""The `indexer` command line (also `python -m indexer`). Exit codes: 0 ok, 1 runtime failure, 2 bad usage or input,
130 interrupted (Ctrl-C).

parser.py defines the commands and options, commands.py their bodies, output.py the printing and exit codes.
"""
from __future__ import annotations

import logging
import sys


def main(argv: list[str] | None = None) -> int:
    from indexer.cli.output import EXIT_INPUT, EXIT_INTERRUPTED, EXIT_RUNTIME, LogLine, error, warn
    from indexer.cli.parser import build_parser
    from indexer.settings import ConfigError, Settings

    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(LogLine("%(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    if not args.verbose:  # psycopg's "error ignored in rollback" while unwinding a failure we report ourselves
        logging.getLogger("psycopg").setLevel(logging.ERROR)
    from indexer.cli import commands
    from indexer.sources.ndjson import InputError

    try:
        settings = Settings.from_env()
        return getattr(commands, f"cmd_{args.command}")(args, settings)
    except (InputError, ConfigError) as exc:  # OperatorConfigError is a ConfigError
        error(str(exc))
        return EXIT_INPUT
    except KeyboardInterrupt as exc:  # exit 130, as a shell reports a command stopped by SIGINT
        from indexer.load.ingest import IngestInterrupted

        if isinstance(exc, IngestInterrupted):
            warn(f"interrupted: {exc} (committed; run the same command again to resume from there)")
        else:
            warn("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the CLI reports, logs carry the trace
        from indexer.load.ingest import IngestFailed

        logging.getLogger("indexer").debug("failure", exc_info=True)
        # an IngestFailed's message names the file and the line to resume after
        error(str(exc) if isinstance(exc, IngestFailed) else f"{type(exc).__name__}: {exc}")
        return EXIT_RUNTIME


if __name__ == "__main__":
    sys.exit(main())
