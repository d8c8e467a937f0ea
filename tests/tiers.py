"""The full tier: tests that `make test` (CI) leaves to `make test-all`.

CI must stay near 20 minutes on a 2-core machine, where the whole suite takes about 90. A test is listed
here when it is long (seconds measured on a 2-core AMD EPYC, `--durations`, each the test's own time)
and either what it pins is also pinned, more cheaply, by a test CI keeps (named in the comment), or it is
a soak: several servers or processes killed at chosen moments. `make test-all` runs everything, listed
or not; run it before changing the stage a listed test covers. A listed id that matches no collected
test fails the collection, so the list cannot go stale silently.
"""

from __future__ import annotations

# node id (a file, or file::test, or a parametrized test's id prefix) -> seconds, and why CI can skip it
FULL_ONLY: dict[str, int] = {
    # ---- e2e lane ----
    # one server swapped across steps (issue 39): 1 start + 4 fresh starts for the comparisons
    "tests/checkpoints/test_ckpt_swap_e2e.py": 333,
    # two shards with their own servers, one killed; and cancelling (CI: tests/flows/test_shards.py)
    "tests/flows/test_shards_e2e.py": 570,
    # the README's training-run walk-through on S3 (CI: tests/flows/test_watch.py, test_training_run.py)
    "tests/flows/test_training_run_e2e.py": 468,
    # two replica servers, one stopped and killed (CI: tests/tasks/test_replica_pool.py)
    "tests/flows/test_replicas_e2e.py": 303,
    # two managed servers, with and without a reasoning parser (CI: tests/core/test_reasoning*.py and
    # tests/fidelity's think-end-token test)
    "tests/flows/test_reasoning_e2e.py": 245,
    # sweep children each with a managed server (CI: tests/flows/test_sweep.py)
    "tests/flows/test_deployments_e2e.py::test_sweep_runs_each_point_through_the_deployment_converting_once": 273,
    # a worker's flow-run process killed, retried as the UI does (CI: test_sigkill_then_rerun_...)
    "tests/flows/test_deployments_e2e.py::test_retry_of_a_crashed_deployment_run_collects_only_lost_batches": 237,
    # three nightly runs (CI: tests/cli/test_compare_command.py, the smoke deployment run)
    "tests/flows/test_deployments_e2e.py::test_nightly_baseline_compares_gates_and_lists_flips": 159,
    # a managed server killed and restarted by the watchdog: pinned nowhere cheaper (CI keeps
    # test_server_that_exits_at_startup_fails_fast_with_its_log for the managed start and its log)
    "tests/flows/test_resume_e2e.py::test_a_managed_server_killed_mid_run_is_restarted_stopped_at_the_end_and_a_cached_rerun_starts_none": 215,
    # (CI: tests/tasks/test_generation_key.py, test_resume_e2e.py::test_sigkill_then_rerun_...)
    "tests/flows/test_resume_e2e.py::test_changed_inputs_miss_exactly_the_affected_batches": 56,
    # the README's own-benchmark walk-through (CI: tests/examples/test_example_envs.py)
    "tests/examples/test_readme_own_benchmark_e2e.py": 196,
    # progress lines while a batch is open; a batch killed mid-way keeps its snapshot (CI: tests/tasks/test_progress.py)
    "tests/flows/test_progress_e2e.py": 288,
    # a managed judge server SIGKILLed mid-phase, then a new one asks only the rest (CI: tests/flows/test_judge_e2e.py,
    # whose judge dies behind the fault proxy; tests/tasks/test_judge_client.py)
    "tests/flows/test_judge_kill_e2e.py": 220,
    # cached completions rescored after a scoring change, and the YAML twin of gsm8k scored alike (CI:
    # tests/tasks/test_rescore_reasoning.py rescores stored batches without a server,
    # tests/tasks/test_generation_key.py keys generation apart from scoring, tests/envs/test_task_gsm8k_twin.py)
    "tests/flows/test_rescore_e2e.py": 83,
    # Tetris with forced tool calls (CI: test_auto_tool_choice_and_turns_without_a_call plays Tetris through the
    # server's parsed calls too; tests/envs/test_tetris_env.py and test_tetris_game.py the rules)
    "tests/flows/test_tools_e2e.py::test_tetris_plays_through_server_parsed_tool_calls": 63,
    # (CI: tests/flows/test_baselines_config.py, tests/envs/*_lm_eval.py)
    "tests/flows/test_baselines_e2e.py": 45,
    # every environment in one run (CI: each env's unit tests; through the server, the gsm8k, completion-mode,
    # Tetris tool-call, YAML-task and failing-scorer e2e tests)
    "tests/flows/test_envs_e2e.py": 51,
    # 2000 math pairs scored by lm-eval and evalflow (CI: tests/envs/test_math_lm_eval.py's recorded verdicts,
    # and the reasoning corpus's test in the same file, which scores MATH items too)
    "tests/fidelity/test_lm_eval_fidelity.py::test_math_equals_lm_eval_on_2000_pairs_in_every_answer_format": 33,
    # (CI: tests/envs/test_env_loading.py names the module and the host)
    "tests/flows/test_deployments_e2e.py::test_a_benchmark_the_worker_cannot_import_fails_before_anything_runs": 21,
    # 96 seeded requests at once (CI: tests/tasks/test_server_settings.py pins the flags that keep the engine alive)
    "tests/flows/test_eval_e2e.py::test_many_concurrent_seeded_requests_keep_the_engine_alive": 45,
    # reasoning completions scored by lm-eval itself with think_end_token (CI: tests/core/test_reasoning.py's split,
    # tests/tasks/test_analysis_reasoning.py, and the ifeval corpus in the same file, scored by lm-eval too)
    "tests/fidelity/test_lm_eval_fidelity.py::test_reasoning_completions_equal_lm_eval_with_think_end_token": 69,
    # ---- fast lane ----
    # a shard corrupt in its record pickle or metadata (CI: test_ckpt_dcp.py's test_truncated_shard and
    # test_missing_metadata; tensor-bytes and missing-CRC cases are in this tier too)
    "tests/checkpoints/test_ckpt_bad_sources.py::test_a_corrupt_shard_is_named_and_nothing_is_cached": 57,
    # (CI: test_both_layouts_convert_... and test_a_hit_in_a_new_process_takes_milliseconds)
    "tests/checkpoints/test_ckpt_dcp.py::test_the_prefect_task_is_cached_by_content": 35,
    # (CI: the e2e lane's deployed fixture runs `evalflow local deploy`, which saves the blocks)
    "tests/cli/test_local_ops.py::test_local_blocks_saves_the_defaults_once": 27,
    # (CI: test_the_api_database_is_migrated_once_then_reused)
    "tests/cli/test_run_startup.py::test_a_second_process_reuses_the_api_database_and_still_records_its_flow_run": 109,
    # (CI: the e2e lane's deployed fixture runs `evalflow local deploy` and starts workers)
    "tests/cli/test_local_ops.py::test_work_pools_are_created_then_kept": 73,
    "tests/cli/test_local_ops.py::test_background_server_starts_once_and_stops": 53,
    # (CI: test_sigkill_mid_conversion_then_convert_again, tests/tasks/test_lease_locks.py)
    "tests/checkpoints/test_ckpt_concurrency.py::test_four_processes_convert_once": 57,
    # (CI: test_both_layouts_convert_..., test_a_hit_in_a_new_process_takes_milliseconds, test_truncated_shard)
    "tests/checkpoints/test_ckpt_dcp.py::test_same_content_elsewhere_hits_and_a_new_checkpoint_at_the_same_path_misses": 43,
    "tests/checkpoints/test_ckpt_dcp.py::test_output_dir_and_skip": 43,
    "tests/checkpoints/test_ckpt_dcp.py::test_a_bf16_save_converts_to_exactly_the_original_folder": 36,
    "tests/checkpoints/test_ckpt_dcp.py::test_config_that_does_not_match_the_tensors": 33,
    "tests/checkpoints/test_ckpt_dcp.py::test_an_hf_folder_is_served_in_place_and_validated_once": 30,
    "tests/checkpoints/test_ckpt_dcp.py::test_force_converts_again": 20,
    # (CI: tests/cli/test_commands.py::test_prepare_prints_the_cached_folder_as_the_last_line)
    "tests/checkpoints/test_ckpt_entry_points.py::test_prepare_says_what_it_does_on_stderr_and_the_path_on_stdout": 54,
    # (CI: test_ckpt_dcp.py's test_truncated_shard)
    "tests/checkpoints/test_ckpt_bad_sources.py::test_a_corrupt_shard_saved_without_crcs_names_the_checkpoint": 45,
    # the real package's 164 HumanEval problems (CI: tests/envs/test_code.py runs every reference solution of the
    # shipped set, and a wrong one, through the same sandbox)
    "tests/envs/test_humaneval_real.py::test_all_164_canonical_solutions_pass": 43,
    "tests/envs/test_humaneval_real.py::test_a_wrong_body_fails_all_164": 39,
    # (CI: test_dcp_on_s3_is_downloaded_once_and_converted_...)
    "tests/checkpoints/test_ckpt_s3.py::test_hf_folder_on_s3_is_downloaded_and_served_in_place": 25,
    # (CI: test_a_killed_holder_on_this_machine_is_taken_over_at_once, test_two_processes_sharing_...)
    "tests/tasks/test_lease_locks.py::test_a_killed_holders_batch_is_taken_over_after_its_lease": 26,
    # (CI: tests/flows/test_watch.py)
    "tests/flows/test_watch_deploy.py::test_notify_runs_the_watch_deployment_for_that_step_and_only_its_own_runs": 37,
    # (CI: `make lint` runs the type checker on the tree)
    "tests/test_typecheck.py::test_a_planted_type_error_fails_the_checker": 21,
}


def is_full_only(nodeid: str) -> bool:
    return any(nodeid == key or nodeid.startswith(key + "::") or nodeid.startswith(key + "[") for key in FULL_ONLY)


def unmatched(nodeids: list[str]) -> list[str]:
    """Listed ids whose file was collected but which match none of its tests (a renamed or deleted test)."""
    files = {nodeid.split("::", 1)[0] for nodeid in nodeids}
    return [
        key for key in FULL_ONLY
        if key.split("::", 1)[0] in files
        and not any(n == key or n.startswith(key + "::") or n.startswith(key + "[") for n in nodeids)
    ]  # fmt: skip
