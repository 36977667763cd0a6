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
    "tests/load/test_reliability_concurrent.py::test_two_concurrent_ingests_match_a_serial_run": "28 s",
    "tests/poller/test_poller_shared.py::test_three_pollers_one_killed_end_like_one_clean_run": "16 s",
    "tests/poller/test_poller_faults.py::test_fault_scenario": "50 seeded scenarios, 2-15 s each",
    "tests/poller/test_poller_faults.py::test_group_that_never_answers": "10 s",
    "tests/poller/test_poller_faults.py::test_failed_cycle_is_recorded_and_the_next_one_resumes": "3.5 s",
    "tests/poller/test_poller_kill.py::test_kill_9_mid_cycle_then_rerun_equals_clean_run": "9 s",
    "tests/reports/test_restitution_report.py::test_cli_writes_files": "8.6 s",
    "tests/cli/test_demo.py::test_demo_polls_the_devnet_and_finds_every_rule_family": "7.4 s",
    "tests/cli/test_reliability_interrupt.py::test_sigint_after_a_committed_batch_is_one_clear_line_and_exit_130":
        "6.8 s",
    "tests/sources/test_quarantine.py::test_cli_exits_2_on_quarantine_unless_allowed": "6.6 s",
    "tests/db/test_reliability_embedded.py::test_password_auth_a_working_url_and_owner_only_files": "6.5 s",
    "tests/db/test_reliability_embedded.py::test_an_older_trust_cluster_is_upgraded_in_place": "3.6 s",
    "tests/sources/test_reliability_credentials.py::test_cli_error_naming_a_url_hides_its_password": "5.9 s",
    "tests/db/test_migrations.py::test_upgrade_downgrade_upgrade_round_trip": "4.2 s",
    "tests/observe/test_observe.py::test_run_once_polls_then_evaluates_and_delivers_alerts": "4.1 s",
    "tests/load/test_resume.py::test_kill_during_ingest_then_rerun_equals_a_clean_run": "3.8 s",
    "tests/poller/test_poller_cli.py::test_run_once_cli": "3.7 s",
    "tests/poller/test_poller_cli.py::test_run_scheduler_stops_on_sigterm": "3.6 s",
    "tests/poller/test_poller_snapshots.py::test_failed_model_read_is_visible_then_resolved": "3.5 s",
    "tests/poller/test_poller_snapshots.py::test_a_snapshot_read_that_breaks_fails_the_cycle_after_its_escrows":
        "3.5 s",
    "tests/poller/test_poller_leases.py::test_a_cycle_waits_for_a_dead_pollers_leases_then_takes_them_over": "3.3 s",
    # over 4 s in a `make quick` run under a load average of 4-5 (most are property tests over many examples)
    "tests/load/test_fastpath.py::test_fast_path_renders_what_the_general_path_renders": "8.9 s",
    "tests/load/test_fastpath.py::test_the_struct_decoder_takes_a_line_only_as_the_general_path_reads_it": "4.3 s",
    "tests/db/test_migrations.py::test_cli_migrate_twice_is_a_no_op": "2.2-8.6 s",
    "tests/poller/test_poller_faults.py::test_escrow_pruned_when_fetched": "two cases, 3.3 and 7.3 s",
    "tests/load/test_export.py::test_payload_and_unknown_fields_survive_ingest_and_export": "1.9-6.1 s",
    "tests/replay/test_replay_machine.py::test_rejected_and_ignored_txs_change_nothing": "6.0 s",
    "tests/replay/test_replay_machine.py::test_state_invariants": "5.5 s",
    "tests/replay/test_replay_machine.py::test_transitions_form_each_records_history": "5.4 s",
    "tests/replay/test_replay_machine.py::test_deterministic_and_input_order_insensitive": "4.1 s",
    "tests/poller/test_poller_devnet.py::test_epochs_advance_with_pruning": "5.7 s",
    "tests/alerts/test_alerts_delivery.py::test_receiver_down_for_an_hour_gets_every_notification_once_back": "5.3 s",
    "tests/load/test_partitions.py::test_migration_converts_data_and_back": "5.3 s",
    "tests/replay/test_replay_follow.py::test_a_killed_follower_loses_nothing": "5.1 s",
    "tests/replay/test_replay_follow.py::test_follower_ends_with_the_tables_of_load_then_replay": "4.1 s",
    "tests/sources/test_ndjson_reader.py::test_duplicate_key_is_found_whatever_the_strings_hold": "5.1 s",
    "tests/sources/test_ndjson_reader.py::test_any_object_with_a_known_kind_is_accepted": "5.1 s",
    "tests/cli/test_reliability_markup.py::test_markup_in_file_names_participants_and_model_ids_is_printed_as_text":
        "4.7 s",
    "tests/replay/test_replay_rows.py::test_database_rows_replay_like_txs": "4.5 s",
    "tests/cli/test_reliability_interrupt.py::test_ctrl_c_stops_the_parallel_replay_after_the_chunks_under_way":
        "4.3 s",
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
