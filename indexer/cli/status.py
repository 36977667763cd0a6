"""`indexer status`: one screen (or one JSON object with --json) on the indexer's state, and an exit code a script
or cron job can act on. The health rule is indexer.observe.health's (the one /ready shares); this module only
connects and prints. Every text that comes from the database (source names, peers' error texts, alert summaries)
goes through one_line: control characters escaped, lengths bounded."""
from __future__ import annotations

import json

import psycopg

from indexer.cli.output import EXIT_INPUT, EXIT_OK, EXIT_RUNTIME, error, one_line
from indexer.db.url import first_line, redact
from indexer.observe.health import Health, ago, check, iso

CONNECT_TIMEOUT = 5  # seconds: a status check must answer even when the server does not


def run_status(url: str, args) -> int:
    try:
        conn = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT, autocommit=True)
    except psycopg.OperationalError as exc:
        error(f"cannot connect to {redact(url)}: {first_line(exc)}")
        return EXIT_INPUT
    fail_on = None if args.fail_on == "none" else args.fail_on
    with conn:
        health = check(conn, args.ready_max_lag, fail_on)
    if args.json:
        print(json.dumps(as_json(health, redact(url)), indent=2))
    else:
        print("\n".join(screen(health, redact(url))))
    return EXIT_OK if health.healthy else EXIT_RUNTIME


def screen(h: Health, database: str) -> list[str]:
    schema = {"ok": "", "missing": " (no schema)",
              "differs": " (schema differs from this code's: any writing command migrates it)"}[h.schema]
    out = [f"database    {one_line(database)}{schema}",
           "health      " + ("healthy" if h.healthy else f"NOT HEALTHY ({len(h.reasons)} reason(s))")]
    out += [f"  - {one_line(reason, 300)}" for reason in h.reasons]
    if h.schema == "missing":
        return out
    out.append("last cycle  " + _cycle_line(h))
    out.append(f"sources     {'class':<14}{'count':>8}{'erroring':>10}{'lagging':>9}{'max lag':>9}")
    for kind, n, erroring, late, max_lag in h.sources:
        out.append(f"            {one_line(kind, 14):<14}{n:>8}{erroring:>10}{late:>9}{ago(max_lag):>9}")
    if not h.sources:
        out.append("            none yet (no poll cycle has run on this database)")
    for source, cursor, lag, last_error, _ in h.shown:
        line = f"  {one_line(source, 60)}: cursor {one_line(cursor if cursor is not None else '-', 30)}, lag {ago(lag)}"
        out.append(line + (f", error: {one_line(last_error, 160)}" if last_error else ""))
    epochs = ", ".join(f"{state} {n} ({first}..{last})" if first != last else f"{state} {n} ({first})"
                       for state, n, first, last in h.epochs)
    out.append(f"epochs      {one_line(epochs, 300) or 'none yet'}")
    firing = ", ".join(f"{rule} ({severity}) x{n}" + (f" +{quiet} silenced" if quiet else "")
                       for rule, severity, n, quiet in h.alerts)
    out.append(f"alerts      {'firing: ' + one_line(firing, 300) if firing else 'none firing'}")
    if h.levels:
        failed = sum(f for _, _, f in h.levels)
        out.append("escrows     verified to " + ", ".join(f"{level} {n}" for level, n, _ in reversed(h.levels))
                   + (f"; {failed} failed a check (api.escrow_verification)" if failed else ""))
    if h.payloads is not None:
        awaited, given_up = h.payloads
        out.append(f"payloads    {awaited} awaited (asked again each cycle), {given_up} given up "
                   "(0/0 Finishes without their response payload: api.awaited_payloads)")
    return out


def _cycle_line(h: Health) -> str:
    if h.cycle is None:
        return "none yet"
    epoch, success_at, last_error, error_at, now = h.cycle
    success = f"last success {ago((now - success_at).total_seconds())} ago" if success_at else "no success yet"
    if last_error is not None:
        return f"FAILED {ago((now - error_at).total_seconds())} ago ({success}): {one_line(last_error, 200)}"
    return f"ok, {success}, chain at epoch {one_line(epoch, 30)}"


def as_json(h: Health, database: str) -> dict:
    cycle = None
    if h.cycle is not None:
        epoch, success_at, last_error, error_at, _ = h.cycle
        cycle = {"outcome": "failed" if last_error is not None else "ok", "epoch": epoch,
                 "last_success_at": iso(success_at), "error": last_error and last_error[:2000],
                 "failed_at": iso(error_at)}
    return {
        "healthy": h.healthy, "reasons": h.reasons, "database": database, "schema": h.schema,
        "max_lag_seconds": h.max_lag, "fail_on": h.fail_on, "last_cycle": cycle,
        "sources": [{"class": k, "count": n, "erroring": e, "lagging": late, "max_lag_seconds": m}
                    for k, n, e, late, m in h.sources],
        "shown_sources": [{"source": s, "cursor": c, "lag_seconds": lag, "last_error": err and err[:2000],
                           "last_success_at": iso(at)} for s, c, lag, err, at in h.shown],
        "epochs": [{"state": s, "count": n, "first": a, "last": b} for s, n, a, b in h.epochs],
        "alerts_firing": [{"rule": r, "severity": sev, "firing": n, "silenced": q} for r, sev, n, q in h.alerts],
        "escrows_by_evidence_level": [{"level": lv, "escrows": n, "failed_a_check": f} for lv, n, f in h.levels],
        "payloads": None if h.payloads is None else {"awaited": h.payloads[0], "given_up": h.payloads[1]},
    }
