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
    "tests/load/test_concurrent_split_ingest.py::test_six_concurrent_ingests_of_split_files_end_as_one_load": "10.6 s",
    "tests/load/test_load_orders.py": "14 loads of one record set in other orders, 1.5-4.5 s each (~45 s)",
    "tests/poller/test_poller_shared.py::test_three_pollers_one_killed_end_like_one_clean_run": "16 s",
    "tests/poller/test_poller_faults.py::test_fault_scenario": "50 seeded scenarios, 2-15 s each",
    "tests/poller/test_poller_faults.py::test_group_that_never_answers": "10 s",
    "tests/poller/test_poller_faults.py::test_failed_cycle_is_recorded_and_the_next_one_resumes": "3.5 s",
    "tests/poller/test_poller_kill.py::test_kill_9_mid_cycle_then_rerun_equals_clean_run": "9 s",
    "tests/reports/test_restitution_report.py::test_cli_writes_files": "8.6 s",
    "tests/cli/test_demo.py::test_demo_polls_the_devnet_and_finds_every_rule_family": "7.4 s",
    "tests/cli/test_demo.py::test_a_second_demo_on_the_same_database_shows_the_stored_findings": "two demos, 11 s",
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
    # more than 0.8 s each (setup, call and teardown) in a full run of 1,672 tests on the 2-core machine while other
    # jobs ran: what `make quick` leaves out to come in at about two minutes
    "tests/alerts/test_alerts_cli.py::test_silence_list_and_lift_through_the_cli": "6.5 s",
    ("tests/alerts/test_alerts_deadline.py::"
     "test_a_dripping_receiver_is_given_up_on_within_the_deadline_and_retried_once"): "2 cases, 5 s",
    "tests/alerts/test_alerts_deadline.py::test_a_slow_channel_does_not_hold_the_others": "2.9 s",
    ("tests/alerts/test_alerts_deadline.py::"
     "test_cli_alerts_without_channels_then_with_a_webhook_delivers_what_is_firing"): "1.3 s",
    ("tests/alerts/test_alerts_deadline.py::"
     "test_notifications_evaluated_without_channels_reach_the_channels_configured_later"): "0.8 s",
    ("tests/alerts/test_alerts_delivery.py::"
     "test_a_delivery_that_never_succeeds_fails_after_give_up_and_says_why"): "0.9 s",
    "tests/alerts/test_alerts_delivery.py::test_crash_between_sending_and_recording_repeats_the_same_key": "0.9 s",
    ("tests/alerts/test_alerts_delivery.py::"
     "test_slack_and_telegram_send_to_their_routes_and_keep_credentials_out_of_the_database"): "1.0 s",
    "tests/alerts/test_alerts_delivery.py::test_two_workers_never_send_one_delivery_at_the_same_time": "0.9 s",
    "tests/alerts/test_alerts_messages.py::test_any_value_stays_escaped_and_bounded": "2.4 s",
    "tests/alerts/test_alerts_messages.py::test_hostile_values_on_the_wire": "1.0 s",
    "tests/alerts/test_alerts_rules.py::test_packaged_rules_evaluate_without_error_apart_from_missing_views": "1.3 s",
    "tests/alerts/test_alerts_rules.py::test_restitution_rules_run_on_the_real_view": "1.4 s",
    "tests/alerts/test_alerts_rules.py::test_rules_on_ingested_findings": "1.0 s",
    "tests/alerts/test_alerts_verification.py::test_fires_once_and_resolves_when_the_escrow_passes": "2.2 s",
    ("tests/alerts/test_alerts_verification.py::"
     "test_one_alert_per_failed_escrow_with_check_nonce_and_a_bounded_reason"): "1.0 s",
    "tests/cli/test_cli.py::test_a_byte_order_mark_before_stdin_s_first_line_is_ignored": "0.8 s",
    "tests/cli/test_cli.py::test_database_url_option_after_the_subcommand": "1.1 s",
    "tests/cli/test_cli.py::test_db_url_starts_the_embedded_server_and_db_stop_stops_it": "2.4 s",
    "tests/cli/test_cli.py::test_ingest_from_stdin": "1.4 s",
    "tests/cli/test_cli.py::test_replay_all_replays_every_escrow_the_first_time": "1.2 s",
    "tests/cli/test_cli_hints.py::test_the_demo_hint_runs_as_printed": "3.0 s",
    "tests/cli/test_cli_status.py::test_a_firing_alert_is_not_healthy_unless_below_fail_on_or_silenced": "1.0 s",
    "tests/cli/test_cli_status.py::test_escrows_per_evidence_level_and_those_that_failed": "2.8 s",
    "tests/cli/test_cli_status.py::test_status_after_the_demo": "4.6 s",
    "tests/cli/test_reliability_inputs.py::test_a_named_pipe_is_read_like_stdin": "1.0 s",
    "tests/cli/test_reliability_inputs.py::test_corrupt_gzip_is_exit_2_naming_the_file": "0.8 s",
    "tests/cli/test_reliability_inputs.py::test_files_before_a_bad_one_are_replayed_and_evaluated": "1.0 s",
    "tests/db/test_embedded_first_run.py::test_a_cluster_whose_home_is_gone_is_removed_when_another_starts": "4.0 s",
    "tests/db/test_embedded_first_run.py::test_a_fresh_system_dir_is_laid_out_under_a_strict_umask": "2.9 s",
    "tests/db/test_embedded_first_run.py::test_a_removed_home_takes_its_cluster_with_it": "3.1 s",
    "tests/db/test_embedded_first_run.py::test_an_older_root_cluster_under_indexer_home_stays_there": "3.2 s",
    ("tests/db/test_embedded_first_run.py::"
     "test_root_starts_a_checkout_in_a_private_directory_without_opening_it"): "2.8 s",
    "tests/db/test_embedded_first_run.py::test_the_port_survives_a_stop_and_moves_only_when_taken": "2.0 s",
    "tests/db/test_embedded_first_run.py::test_the_reader_login_reads_api_and_nothing_else": "5.2 s",
    "tests/db/test_embedded_setups.py::test_libpq_variables_do_not_reach_the_embedded_server": "7.9 s",
    "tests/db/test_embedded_setups.py::test_the_server_starts_under_a_long_or_unusual_path": "2 servers, 4-6 s",
    "tests/db/test_migrations.py::test_reader_role_exists_and_a_second_database_migrates_with_it_present": "1.9 s",
    "tests/db/test_migrations.py::test_reader_role_selects_api_and_nothing_else": "0.8 s",
    "tests/db/test_reliability_migrate.py::test_a_users_view_in_the_way_fails_the_migration_with_its_name": "0.9 s",
    "tests/db/test_reliability_migrate.py::test_a_users_view_on_api_survives_migrate": "0.9 s",
    "tests/db/test_reliability_migrate.py::test_a_view_whose_columns_changed_is_recreated_alone": "1.1 s",
    "tests/db/test_reliability_migrate.py::test_downgrade_names_a_users_view_instead_of_dropping_it": "1.4 s",
    ("tests/devnet/test_host_wire_shapes.py::"
     "test_a_host_serving_another_shape_leaves_the_payload_unknown_and_says_why"): "0.9 s",
    ("tests/load/test_epoch_snapshots_db.py::"
     "test_a_decimal_the_views_cannot_read_is_quarantined_with_its_path"): "5 cases, 4 s",
    "tests/load/test_epoch_snapshots_db.py::test_an_exact_snapshot_is_never_replaced_by_an_inexact_one": "3 cases, 3 s",
    "tests/load/test_epoch_snapshots_db.py::test_an_inexact_snapshot_is_replaced_by_an_exact_one": "1.1 s",
    "tests/load/test_epoch_snapshots_db.py::test_ingested_snapshot_shows_in_api_epochs": "0.8 s",
    "tests/load/test_export.py::test_cli_export_epochs_range": "1.0 s",
    "tests/load/test_export.py::test_cli_export_gz_ingests_like_plain": "2.8 s",
    "tests/load/test_export.py::test_export_of_the_export_is_byte_identical": "2.6 s",
    "tests/load/test_export.py::test_export_round_trips_through_ingest": "2.3 s",
    "tests/load/test_fastpath.py::test_the_load_variants_agree_with_fast_and_name_the_key": "2.0 s",
    "tests/load/test_ingest.py::test_64_bit_values_as_numbers_or_decimal_strings_load_identically": "2.1 s",
    "tests/load/test_ingest.py::test_amendment_replaces_row_keeps_history_and_re_replays": "1.2 s",
    "tests/load/test_ingest.py::test_batches_commit_without_waiting_for_the_wal_and_leave_their_stages_empty": "2.0 s",
    "tests/load/test_ingest.py::test_ingest_marks_touched_epochs_and_replays_touched_escrows": "1.3 s",
    "tests/load/test_ingest.py::test_reloading_an_amended_record_unchanged_is_not_an_amendment": "1.7 s",
    "tests/load/test_ingest.py::test_same_file_twice_changes_nothing": "2.3 s",
    "tests/load/test_ingest.py::test_same_file_twice_with_duplicates_across_batches_changes_nothing": "1.4 s",
    "tests/load/test_ingest.py::test_same_key_twice_in_one_batch_last_wins": "0.9 s",
    "tests/load/test_ingest.py::test_u64_cost_fills_the_numeric_column": "0.9 s",
    "tests/load/test_ingest.py::test_unknown_fields_are_kept_in_extra": "1.0 s",
    "tests/load/test_load_deadlock_retry.py::test_a_deadlocked_batch_is_tried_again_and_loads_once": "2.4 s",
    ("tests/load/test_load_probe.py::"
     "test_the_probe_of_the_partition_a_batch_goes_to_finds_what_the_parent_finds"): "0.9 s",
    "tests/load/test_partition_planning.py::test_a_sibling_lookup_probes_the_hash_index_of_escrow_and_prompt": "1.6 s",
    ("tests/load/test_partition_planning.py::"
     "test_analyze_after_a_load_refreshes_the_written_partitions_not_the_parent"): "1.4 s",
    ("tests/load/test_partition_planning.py::"
     "test_analyze_after_a_load_skips_a_partition_autovacuum_holds_and_the_rules_stage_analyses_it"): "1.2 s",
    ("tests/load/test_partition_planning.py::"
     "test_each_rules_statement_planned_for_one_epoch_keeps_that_epochs_partitions"): "1.6 s",
    ("tests/load/test_partition_planning.py::"
     "test_the_loader_analyses_a_written_partition_when_autovacuum_would"): "1.2 s",
    "tests/load/test_partitions.py::test_escrow_amended_to_another_epoch_takes_its_rows": "1.7 s",
    "tests/load/test_partitions.py::test_escrow_amended_to_another_epoch_takes_its_rule_findings": "4 cases, 5 s",
    "tests/load/test_partitions.py::test_one_epoch_query_reads_one_partition_per_table": "4 cases, 4 s",
    "tests/load/test_partitions.py::test_the_largest_epoch_gets_its_partition_and_the_views_read_it": "0.9 s",
    "tests/load/test_partitions.py::test_txs_before_their_escrow_move_to_its_epoch": "1.6 s",
    ("tests/load/test_reliability_workers.py::"
     "test_a_block_that_kills_its_worker_twice_ends_the_load_naming_file_and_lines"): "1.0 s",
    "tests/load/test_reliability_workers.py::test_a_typing_process_that_dies_once_loses_nothing": "0.8 s",
    "tests/load/test_typer.py::test_random_records_type_as_the_python_paths": "1.9 s",
    "tests/observe/test_observe.py::test_concurrent_scrapes_use_one_connection_and_all_get_an_answer": "12.2 s",
    "tests/observe/test_observe.py::test_escrows_per_evidence_level_every_level_with_zero": "1.7 s",
    "tests/observe/test_observe.py::test_firing_alerts_have_a_series_per_rule_even_when_none_fires": "0.8 s",
    "tests/observe/test_observe.py::test_metrics_carry_the_interface_names_with_database_values": "2.4 s",
    ("tests/observe/test_observe.py::"
     "test_ready_turns_503_when_the_database_is_gone_or_a_source_lags_and_recovers"): "1.1 s",
    "tests/observe/test_observe.py::test_run_with_the_metrics_address_in_use_exits_2_naming_it": "0.8 s",
    "tests/poller/test_freezing.py::test_a_partition_another_session_holds_is_skipped_and_frozen_next_time": "1.7 s",
    "tests/poller/test_freezing.py::test_a_partition_dropped_after_the_list_was_read_is_skipped": "4.2 s",
    "tests/poller/test_freezing.py::test_a_partition_made_again_is_frozen_again": "2.0 s",
    "tests/poller/test_freezing.py::test_a_settled_epoch_gets_statistics_at_the_servers_target": "1.4 s",
    "tests/poller/test_freezing.py::test_epochs_past_the_pruning_window_are_settled": "1.8 s",
    "tests/poller/test_freezing.py::test_freezes_final_epochs_once_and_leaves_the_others": "2.4 s",
    "tests/poller/test_poller_commit_retry.py": "3 tests, 4 s",
    ("tests/poller/test_poller_decode_workers.py::"
     "test_an_escrow_whose_decode_kills_the_worker_fails_alone_then_is_captured"): "4.5 s",
    "tests/poller/test_poller_devnet.py": "7 tests, 15 s",
    "tests/poller/test_poller_durability.py": "3 tests, 3 s",
    "tests/poller/test_poller_faults.py::test_settlement_race": "1.9 s",
    "tests/poller/test_poller_faults.py::test_snapshot_race": "1.8 s",
    "tests/poller/test_poller_finality.py": "4 tests, 4 s",
    "tests/poller/test_poller_hostile.py::test_a_body_of_spaces_is_archived_cut_short": "6.2 s",
    "tests/poller/test_poller_hostile.py::test_a_chain_node_answering_wrongly_is_failed_over": "3 cases, 23 s",
    "tests/poller/test_poller_hostile.py::test_a_chain_node_moving_an_escrow_to_another_epoch_is_failed_over": "5.4 s",
    "tests/poller/test_poller_hostile.py::test_a_healthz_object_is_a_failure_of_that_host": "5.6 s",
    ("tests/poller/test_poller_hostile.py::"
     "test_a_host_at_the_operator_s_own_node_cannot_cut_the_poller_off_its_chain"): "5.3 s",
    "tests/poller/test_poller_hostile.py::test_a_host_trickling_its_headers_costs_one_deadline": "7.7 s",
    "tests/poller/test_poller_hostile.py::test_a_host_with_a_malformed_length_is_skipped": "2 cases, 11 s",
    "tests/poller/test_poller_hostile.py::test_a_lying_tx_search_is_recorded_and_another_node_asked": "2 cases, 11 s",
    "tests/poller/test_poller_hostile.py::test_a_trickling_host_costs_one_deadline_per_cycle": "7.5 s",
    "tests/poller/test_poller_hostile.py::test_an_inference_url_cannot_point_the_poller_anywhere": "4 cases, 42 s",
    "tests/poller/test_poller_hostile.py::test_one_member_cannot_deny_the_log_with_an_empty_page": "5.4 s",
    "tests/poller/test_poller_leases.py::test_a_poller_without_progress_stops_renewing_so_its_leases_expire": "1.5 s",
    "tests/poller/test_poller_leases.py::test_work_another_poller_finishes_during_the_cycle_is_not_done_again": "1.4 s",
    "tests/poller/test_poller_races.py": "5 tests, 15 s",
    "tests/poller/test_poller_snapshots.py": "5 tests, 6 s",
    ("tests/poller/test_run_follows_embedded.py::"
     "test_run_finds_the_embedded_server_again_after_a_stop_and_a_move"): "65.7 s",
    "tests/replay/test_reliability_replay_workers.py": "5 tests, 12 s",
    "tests/replay/test_replay_db.py::test_parallel_replay_workers_give_the_same_tables_as_one_connection": "1.8 s",
    "tests/replay/test_replay_machine.py::test_any_tx_list_never_raises": "1.4 s",
    "tests/reports/test_evidence_level.py::test_reports_show_the_level_and_why_it_is_below_settled_escaped": "2.3 s",
    "tests/reports/test_evidence_level.py::test_terminal_report_lists_levels_and_failed_escrows": "1.4 s",
    ("tests/reports/test_evidence_level.py::"
     "test_views_carry_each_escrows_level_and_the_weakest_behind_a_host_epoch"): "1.2 s",
    "tests/reports/test_report.py::test_html_report_is_self_contained_with_charts": "1.3 s",
    "tests/reports/test_restitution_db.py::test_crosses_mid_epoch_but_ends_below": "1.0 s",
    "tests/reports/test_restitution_db.py::test_e366_anchor_llr_reward_and_flip": "0.8 s",
    "tests/reports/test_restitution_db.py::test_exclusion_observed_vs_computed_and_missing_snapshots": "0.8 s",
    "tests/reports/test_restitution_db.py::test_restitution_reports_the_epochs_pass_count_flags": "0.9 s",
    ("tests/reports/test_restitution_delegation.py::"
     "test_demo_report_lists_the_host_whose_delegation_is_unknown"): "1.2 s",
    "tests/reports/test_restitution_demo.py::test_reward_if_passed_is_kept_and_only_flips_are_restituted": "0.9 s",
    "tests/reports/test_restitution_proposal.py::test_cli_proposes_the_demo_restitution_and_refuses_bad_usage": "1.7 s",
    "tests/reports/test_restitution_proposal.py::test_cli_writes_the_proposal": "1.3 s",
    "tests/reports/test_restitution_report.py::test_markdown_csv_and_line": "1.0 s",
    "tests/reports/test_restitution_report.py::test_tests_not_computed_are_named": "1.1 s",
    "tests/reports/test_reward_weight.py::test_real_payouts_equal_the_v0212_weight_rule": "11.1 s",
    "tests/rules/test_rules_challenges.py::test_outcome_without_suspects": "0.8 s",
    "tests/rules/test_rules_challenges.py::test_suspect_evidence_kinds_and_their_boundaries": "0.8 s",
    "tests/rules/test_rules_idempotency.py::test_a_new_parser_version_re_parses_and_re_evaluates_clean_epochs": "0.9 s",
    "tests/rules/test_rules_idempotency.py::test_a_new_rule_version_re_evaluates_stale_epochs": "0.8 s",
    "tests/rules/test_rules_idempotency.py::test_amended_record_reevaluates_only_its_epoch": "1.0 s",
    "tests/rules/test_rules_idempotency.py::test_each_run_row_counts_its_own_claim": "1.5 s",
    "tests/rules/test_rules_idempotency.py::test_epochs_range_reevaluates_only_that_range": "0.9 s",
    "tests/rules/test_rules_idempotency.py::test_first_run_finds_everything_and_second_run_evaluates_nothing": "1.1 s",
    ("tests/rules/test_rules_idempotency.py::"
     "test_late_records_re_evaluate_their_escrows_and_agree_with_a_whole_epoch"): "0.8 s",
    "tests/rules/test_rules_idempotency.py::test_more_epochs_than_one_claim": "1.4 s",
    "tests/rules/test_rules_idempotency.py::test_reloading_a_payload_leaves_its_parse_row_alone": "1.1 s",
    ("tests/sources/test_fastclient.py::"
     "test_a_malformed_length_is_a_protocol_error_not_a_read_to_the_end"): "3 cases, 15 s",
    "tests/sources/test_fastclient.py::test_a_peer_trickling_its_headers_is_cut_at_the_deadline": "6.5 s",
    "tests/sources/test_ndjson_reader.py::test_object_without_kind_is_rejected_naming_kind": "1.2 s",
    ("tests/sources/test_pipelining.py::"
     "test_an_origin_that_drops_pipelined_requests_gets_one_at_a_time_after_the_first_timeout"): "1.0 s",
    "tests/test_archive.py": "6 tests, 9 s",
    "tests/test_bench.py::test_startup_bench_runs": "2.3 s",
    "tests/test_hermetic.py::test_a_session_started_from_a_configured_shell_is_clean": "a pytest session, 6 s",
    ("tests/test_messages.py::"
     "test_a_full_disk_names_the_file_and_the_last_committed_line_like_a_lost_connection"): "1.5 s",
    "tests/test_messages.py::test_archive_rerun_names_an_archived_file_that_was_deleted": "1.6 s",
    "tests/test_messages.py::test_ingest_checks_an_archived_file_against_its_manifest": "2.2 s",
    "tests/test_messages.py::test_ingest_of_a_truncated_gzip_file_names_the_file_and_line": "0.9 s",
    "tests/test_slow_marks.py::test_every_slow_name_is_a_test_of_the_suite": "1.0 s",
    "tests/wire/test_wire_versions.py::test_library_parse_matches_an_independent_encoder": "1.0 s",
    "tests/wire/test_wire_versions.py::test_lines_written_from_messages_are_the_records_lines": "1.4 s",
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
