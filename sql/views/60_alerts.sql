-- The alert job's state and its deliveries (interface.md §3, §4). Silenced alerts are still listed: silencing stops
-- notifications, not evaluation.
CREATE VIEW api.alerts AS
SELECT s.alert_key, s.rule, s.severity, s.status, s.participant, s.epoch_index, s.summary, s.details,
       s.first_fired_at, s.last_evaluated_at, s.resolved_at, s.last_seen_at, s.last_notified_at,
       EXISTS (SELECT 1 FROM alert.silence x
               WHERE x.ends_at > now() AND (x.alert_key = s.alert_key OR x.rule = s.rule)) AS silenced
FROM alert.state s;

CREATE VIEW api.alert_deliveries AS
SELECT n.alert_key, d.channel, d.status, d.attempts, d.last_error, d.delivered_at,
       n.status AS notification_status, d.idempotency_key, n.created_at, d.next_attempt_at
FROM alert.delivery d
JOIN alert.notification n ON n.notification_id = d.notification_id;
