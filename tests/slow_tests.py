"""The slowest tests, marked `slow` in one place (tests/conftest.py applies the marks). Seconds: `pytest
--durations` on a 2-core machine shared with other jobs. `make quick` runs `-m "not slow"` for a fast loop; `make
test` and CI run everything. A name here that matches no test of a collected file stops the run, so the list cannot
go stale silently."""
from __future__ import annotations

from collections.abc import Iterable

SLOW = {
    "tests/test_packaging.py": "two wheels built and installed, the demo run from each: ~35 s",
    "tests/test_bench.py::test_ingest_bench_runs": "31 s",
    "tests/test_bench.py::test_poller_bench_runs": "4.8 s",
    "tests/test_bench.py::test_replay_bench_runs_and_finds_its_tables_identical": "4.2 s",
    "tests/test_bench.py::test_rules_bench_runs": "2.9 s",
    "tests/test_reliability_concurrent.py::test_two_concurrent_ingests_match_a_serial_run": "28 s",
    "tests/test_poller_shared.py::test_three_pollers_one_killed_end_like_one_clean_run": "16 s",
    "tests/test_poller_faults.py::test_fault_scenario": "50 seeded scenarios, 2-15 s each",
    "tests/test_poller_faults.py::test_group_that_never_answers": "10 s",
    "tests/test_poller_faults.py::test_failed_cycle_is_recorded_and_the_next_one_resumes": "3.5 s",
    "tests/test_poller_kill.py::test_kill_9_mid_cycle_then_rerun_equals_clean_run": "9 s",
    "tests/test_restitution_report.py::test_cli_writes_files": "8.6 s",
    "tests/test_demo.py::test_demo_polls_the_devnet_and_finds_every_rule_family": "7.4 s",
    "tests/test_reliability_interrupt.py::test_sigint_after_a_committed_batch_is_one_clear_line_and_exit_130": "6.8 s",
    "tests/test_quarantine.py::test_cli_exits_2_on_quarantine_unless_allowed": "6.6 s",
    "tests/test_reliability_embedded.py::test_password_auth_a_working_url_and_owner_only_files": "6.5 s",
    "tests/test_reliability_embedded.py::test_an_older_trust_cluster_is_upgraded_in_place": "3.6 s",
    "tests/test_reliability_credentials.py::test_cli_error_naming_a_url_hides_its_password": "5.9 s",
    "tests/test_migrations.py::test_upgrade_downgrade_upgrade_round_trip": "4.2 s",
    "tests/test_observe.py::test_run_once_polls_then_evaluates_and_delivers_alerts": "4.1 s",
    "tests/test_resume.py::test_kill_during_ingest_then_rerun_equals_a_clean_run": "3.8 s",
    "tests/test_poller_cli.py::test_run_once_cli": "3.7 s",
    "tests/test_poller_cli.py::test_run_scheduler_stops_on_sigterm": "3.6 s",
    "tests/test_poller_snapshots.py::test_failed_model_read_is_visible_then_resolved": "3.5 s",
    "tests/test_poller_snapshots.py::test_a_snapshot_read_that_breaks_fails_the_cycle_after_its_escrows": "3.5 s",
    "tests/test_poller_leases.py::test_a_cycle_waits_for_a_dead_pollers_leases_then_takes_them_over": "3.3 s",
}


def _named_by(nodeid: str, name: str) -> bool:
    return nodeid == name or nodeid.startswith((name + "::", name + "["))


def marked(nodeids: Iterable[str], slow: Iterable[str] = SLOW) -> tuple[set[str], list[str]]:
    """(the node ids ``slow`` names, a test file or a test with all its parameters; the names in ``slow`` whose
    file is among ``nodeids`` but that match none of them)."""
    nodeids, slow = list(nodeids), list(slow)
    hits = {name: {n for n in nodeids if _named_by(n, name)} for name in slow}
    files = {n.split("::")[0] for n in nodeids}
    stale = sorted(name for name, found in hits.items() if not found and name.split("::")[0] in files)
    return set().union(*hits.values()), stale
