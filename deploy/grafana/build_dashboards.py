"""Writes the provisioned Grafana dashboards (deploy/grafana/dashboards/*.json) from the panel list below.

The JSON files are what Grafana loads; this script is how they are edited (tests/test_deploy.py checks that the
files are what it writes, runs every panel's SQL as indexer_reader against the demo's data, and checks each panel's
columns). Run: python deploy/grafana/build_dashboards.py
"""
from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards"
PG = {"type": "grafana-postgresql-datasource", "uid": "indexer-db"}
PROM = {"type": "prometheus", "uid": "prometheus"}


def sql_panel(title, kind, sql, columns, *, w=24, h=8, description="", options=None, fmt="table"):
    """A panel on the indexer's database; ``columns``: the fields it shows, in order (an organize transformation
    pins them, and the test checks the query returns them)."""
    panel = {"type": kind, "title": title, "description": description, "datasource": PG,
             "gridPos": {"w": w, "h": h},
             "targets": [{"refId": "A", "datasource": PG, "rawQuery": True, "editorMode": "code", "format": fmt,
                          "rawSql": " ".join(sql.split())}],
             "transformations": [{"id": "organize", "options": {
                 "indexByName": {c: i for i, c in enumerate(columns)}}}],
             "options": options or {}}
    if kind == "barchart":
        panel["options"] = {"xField": columns[0], "orientation": "auto", "stacking": "normal",
                            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                            **(options or {})}
    if kind == "table":
        panel["options"] = {"showHeader": True, "cellHeight": "sm", **(options or {})}
    return panel


def prom_panel(title, exprs, *, w=12, h=8, unit="short", description=""):
    return {"type": "timeseries", "title": title, "description": description, "datasource": PROM,
            "gridPos": {"w": w, "h": h}, "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(65 + i), "datasource": PROM, "expr": e, "legendFormat": legend}
                        for i, (e, legend) in enumerate(exprs)]}


def dashboard(uid, title, panels, variables=(), description=""):
    x = y = 0
    row_h = 0
    for i, p in enumerate(panels, 1):  # lay panels out left to right, wrapping at 24 columns
        g = p["gridPos"]
        if x + g["w"] > 24:
            x, y, row_h = 0, y + row_h, 0
        g.update(x=x, y=y)
        x, row_h = x + g["w"], max(row_h, g["h"])
        p["id"] = i
    return {"uid": uid, "title": title, "description": description, "tags": ["devshard-indexer"],
            "schemaVersion": 39, "version": 1, "editable": True, "time": {"from": "now-7d", "to": "now"},
            "refresh": "1m", "panels": panels, "templating": {"list": list(variables)}, "annotations": {"list": []}}


def query_variable(name, label, sql):
    return {"name": name, "label": label, "type": "query", "datasource": PG, "query": " ".join(sql.split()),
            "definition": " ".join(sql.split()), "refresh": 1, "includeAll": False, "multi": False,
            "current": {}, "options": [], "sort": 1}


OVERVIEW = dashboard("indexer-overview", "Devshard indexer: overview per epoch", [
    sql_panel("Disputable penalties per epoch", "barchart", """
        SELECT epoch_index::text AS epoch, sum(disputable_missed) AS disputable_missed,
               sum(disputable_invalid) AS disputable_invalid
        FROM api.host_epoch_penalties GROUP BY epoch_index ORDER BY epoch_index""",
              ["epoch", "disputable_missed", "disputable_invalid"], w=12,
              description="Penalties the governance-limit rules would not uphold, summed over hosts."),
    sql_panel("Hosts affected per epoch", "barchart", """
        SELECT epoch_index::text AS epoch,
               count(*) FILTER (WHERE disputable_missed + disputable_invalid > 0) AS hosts_affected,
               count(*) AS hosts
        FROM api.host_epoch_penalties GROUP BY epoch_index ORDER BY epoch_index""",
              ["epoch", "hosts_affected", "hosts"], w=12, options={"stacking": "none"}),
    sql_panel("Disputable penalties by rule family", "table", """
        SELECT epoch_index, rule, penalty, count(*) AS penalties, count(DISTINCT participant) AS hosts
        FROM api.disputable_penalties GROUP BY epoch_index, rule, penalty ORDER BY epoch_index DESC, rule""",
              ["epoch_index", "rule", "penalty", "penalties", "hosts"], w=12, h=10),
    sql_panel("Amount to restitute per epoch (GNK)", "barchart", """
        SELECT epoch_index::text AS epoch, COALESCE(sum(restitution_amount), 0) / 1e9 AS restitution_gnk,
               count(*) FILTER (WHERE restitution_candidate) AS restitution_candidates,
               count(*) FILTER (WHERE restitution_candidate IS NULL) AS undecided_hosts,
               COALESCE(sum(restitution_amount) FILTER (WHERE evidence_level = 'settled'), 0) / 1e9
                 AS on_settled_logs_gnk
        FROM api.restitution_impact GROUP BY epoch_index ORDER BY epoch_index""",
              ["epoch", "restitution_gnk", "restitution_candidates", "undecided_hosts", "on_settled_logs_gnk"],
              w=12, h=10, options={"stacking": "none"},
              description="The amounts the restitution report asks to pay (api.restitution_impact.restitution_amount, "
                          "ngonka / 1e9): only hosts whose epoch outcome the disputable penalties changed and who "
                          "pass both tests without them; undecided hosts (NULL) are counted, never summed. "
                          "on_settled_logs_gnk: the part whose disputable penalties all lie in escrow logs verified "
                          "to settled (evidence_level)."),
    sql_panel("Hosts with disputable penalties", "table", """
        SELECT epoch_index, participant, missed, invalid, disputable_missed, disputable_invalid
        FROM api.host_epoch_penalties WHERE disputable_missed + disputable_invalid > 0
        ORDER BY epoch_index DESC, disputable_missed + disputable_invalid DESC, participant""",
              ["epoch_index", "participant", "missed", "invalid", "disputable_missed", "disputable_invalid"],
              h=10, options={"footer": {"show": False}}),
    sql_panel("Escrow logs per evidence level", "barchart", """
        SELECT epoch_index::text AS epoch, count(*) FILTER (WHERE level = 'settled') AS settled,
               count(*) FILTER (WHERE level = 'replayed') AS replayed,
               count(*) FILTER (WHERE level = 'signed') AS signed, count(*) FILTER (WHERE level = 'none') AS "none",
               count(failed_check) AS failed_a_check
        FROM api.escrow_verification GROUP BY epoch_index ORDER BY epoch_index""",
              ["epoch", "settled", "replayed", "signed", "none", "failed_a_check"], w=12, h=10,
              options={"stacking": "none"},
              description="Per epoch, escrows by the strongest check their log passed (api.escrow_verification: "
                          "signed, replayed, settled; none = not verified yet or no log that passes) and how many "
                          "failed a check. Findings below settled rest on a log not shown to be the one the chain "
                          "settled; the failed escrows are listed in api.escrow_verification and alerted "
                          "(escrow_verification_failed)."),
], description="What the disputable penalties amount to, epoch by epoch.")

HOST = dashboard("indexer-host", "Devshard indexer: host drill-down", [
    sql_panel("Penalties per epoch: recorded and disputable", "barchart", """
        SELECT epoch_index::text AS epoch, missed, invalid, disputable_missed, disputable_invalid
        FROM api.host_epoch_penalties WHERE participant = '${participant}' ORDER BY epoch_index""",
              ["epoch", "missed", "invalid", "disputable_missed", "disputable_invalid"], w=12,
              options={"stacking": "none"}),
    sql_panel("Invalidation SPRT trajectory", "barchart", """
        SELECT epoch_index::text AS epoch, sprt_max_llr, sprt_max_llr_without_disputable, sprt_threshold
        FROM api.restitution_impact WHERE participant = '${participant}' ORDER BY epoch_index""",
              ["epoch", "sprt_max_llr", "sprt_max_llr_without_disputable", "sprt_threshold"], w=12,
              options={"stacking": "none"},
              description="The log-likelihood ratio with and without the disputable invalidations, beside the "
                          "threshold that ends an epoch for the host."),
    sql_panel("Disputable penalties with evidence", "table", """
        SELECT epoch_index, escrow_id, inference_id, penalty, rule, verdict, evidence::text AS evidence, detected_at
        FROM api.disputable_penalties WHERE participant = '${participant}'
        ORDER BY epoch_index DESC, escrow_id, inference_id""",
              ["epoch_index", "escrow_id", "inference_id", "penalty", "rule", "verdict", "evidence", "detected_at"],
              h=12, options={"cellHeight": "md"}),
    sql_panel("Alerts about this host", "table", """
        SELECT alert_key, rule, severity, status, epoch_index, summary, first_fired_at, resolved_at
        FROM api.alerts WHERE participant = '${participant}' ORDER BY first_fired_at DESC""",
              ["alert_key", "rule", "severity", "status", "epoch_index", "summary", "first_fired_at", "resolved_at"],
              h=8),
], variables=[query_variable("participant", "Host", """
    SELECT DISTINCT participant FROM api.host_epoch_penalties ORDER BY 1""")],
    description="One host: its penalties with evidence, its SPRT trajectory, its alerts.")

GOVERNANCE = dashboard("indexer-governance", "Devshard indexer: governance limits", [
    sql_panel("Governance --max-model-len per model and epoch", "table", """
        SELECT epoch_index, model_id, governance_limit, limit_source, loophole_risk, flag_occurrences, mixed_forms,
               array_to_string(model_args, ' ') AS model_args
        FROM api.model_limits ORDER BY epoch_index DESC, model_id""",
              ["epoch_index", "model_id", "governance_limit", "limit_source", "loophole_risk", "flag_occurrences",
               "mixed_forms", "model_args"], h=10,
              description="loophole_risk: the flag occurs more than once or in both forms (#1911)."),
    sql_panel("Hosts serving above the limit (raised-limit suspects)", "table", """
        SELECT epoch_index, participant, model_id, count(*) AS signs, max(observed_tokens) AS max_observed_tokens,
               max(governance_limit) AS governance_limit
        FROM api.raised_limit_suspects GROUP BY epoch_index, participant, model_id
        ORDER BY epoch_index DESC, signs DESC""",
              ["epoch_index", "participant", "model_id", "signs", "max_observed_tokens", "governance_limit"], h=10),
    sql_panel("Context-length verdicts per model", "barchart", """
        SELECT model_id, count(*) FILTER (WHERE verdict = 'over_limit') AS over_limit,
               count(*) FILTER (WHERE verdict = 'fits') AS fits,
               count(*) FILTER (WHERE verdict = 'undetermined') AS undetermined
        FROM api.context_refusals GROUP BY model_id ORDER BY model_id""",
              ["model_id", "over_limit", "fits", "undetermined"], h=8),
], description="The limits in force, per model and epoch, and who runs above them.")

INGEST = dashboard("indexer-ingest", "Devshard indexer: ingest health", [
    prom_panel("Source lag (s)", [("max by (source) (indexer_source_lag_seconds)", "{{source}}")], unit="s"),
    prom_panel("Fetch errors per minute", [("sum by (source) (rate(indexer_source_errors_total[5m])) * 60",
                                            "{{source}}")]),
    prom_panel("Ready", [("indexer_ready", "{{instance}}"), ("indexer_database_up", "db {{instance}}")]),
    prom_panel("Poll cycle duration (p50, p95)", [
        ("histogram_quantile(0.5, sum by (le) (rate(indexer_cycle_seconds_bucket[15m])))", "p50"),
        ("histogram_quantile(0.95, sum by (le) (rate(indexer_cycle_seconds_bucket[15m])))", "p95")], unit="s"),
    sql_panel("Cursor positions", "table", """
        SELECT source, cursor, last_success_at, round(lag_seconds::numeric) AS lag_seconds, stalled_cycles,
               last_error
        FROM api.ingest_status WHERE NOT starts_with(source, 'escrow-final:')
        ORDER BY lag_seconds DESC NULLS LAST, source LIMIT 200""",
              ["source", "cursor", "last_success_at", "lag_seconds", "stalled_cycles", "last_error"], w=12, h=10),
    sql_panel("Fetch failures per source class (24 h)", "barchart", """
        SELECT c.source_class, count(e.id) AS failures, count(e.id) FILTER (WHERE NOT e.transient) AS permanent
        FROM (SELECT DISTINCT split_part(source, ':', 1) AS source_class FROM api.ingest_status) c
        LEFT JOIN api.source_errors e ON e.source_class = c.source_class AND e.at > now() - interval '24 hours'
        GROUP BY c.source_class ORDER BY c.source_class""",
              ["source_class", "failures", "permanent"], w=12, h=10, options={"stacking": "none"}),
], description="Is the poller keeping up: lag, errors, cursors.")

DASHBOARDS = {"overview.json": OVERVIEW, "host.json": HOST, "governance.json": GOVERNANCE, "ingest.json": INGEST}


def render() -> dict[str, str]:
    return {name: json.dumps(d, indent=2) + "\n" for name, d in DASHBOARDS.items()}


if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
