"""What seff, kiln why and kiln stats print from schedd's replies (rendering only)."""

from __future__ import annotations

from cli import outlook, seff, stats, why
from cli.sinfo_json import json_node, json_partition

ROW = {"job_id": "5", "job_id_raw": "5", "cluster": "kiln", "user": "alice", "gid": -1,
       "state": "COMPLETED", "state_base": "COMPLETED", "exit_code": "0:0", "nnodes": 2,
       "alloc_cpus": 8, "elapsed": 3600, "alloc_tres": "billing=8,cpu=8,mem=16G,node=2",
       "max_rss_kb": 4 * 1024 * 1024, "alloc_gpus": 4, "gpu_util": 61.25, "gpu_util_max": 90.0,
       "gpu_mem_max_mb": 81920.0, "node_list": "n[1-2]", "array_job_id": None,
       "array_task_id": None}
NODES = [{"name": "n1", "gpus": [{"model": "NVIDIA A100-80GB", "memory_mb": 81920}]}]


def test_seff_lines_in_slurms_order_with_gpu_lines() -> None:
    assert seff.report_lines(ROW, NODES) == [
        "Job ID: 5", "Cluster: kiln", "User/Group: alice/-1", "State: COMPLETED (exit code 0)",
        "Nodes: 2", "Cores per node: 4",
        "CPU Utilized: unavailable (not measured yet)",
        "CPU Efficiency: unavailable of 08:00:00 core-walltime",
        "Job Wall-clock time: 01:00:00", "Memory Utilized: 4.00 GB",
        "Memory Efficiency: 25.00% of 16.00 GB", "GPUs: 4 (NVIDIA A100-80GB)",
        "GPU Efficiency: 61.25% mean utilisation (peak 90.00%)",
        "GPU Memory Utilized: 80.00 GB (25.00% of 320.00 GB)"]


def test_seff_without_samples_and_for_pending_and_array_jobs() -> None:
    bare = {**ROW, "max_rss_kb": None, "gpu_util": None, "gpu_util_max": None,
            "gpu_mem_max_mb": None, "total_cpu": 7200.0, "nnodes": 1}
    lines = seff.report_lines(bare, [])
    assert "Memory Utilized: unavailable (no samples)" in lines
    assert "GPU Efficiency: unavailable (no GPU samples)" in lines
    assert "CPU Efficiency: 25.00% of 08:00:00 core-walltime" in lines
    assert "Cores: 8" in lines
    pending = {**ROW, "state": "PENDING", "state_base": "PENDING", "job_id": "9_2",
               "job_id_raw": "11", "array_job_id": 9, "array_task_id": 2}
    lines = seff.report_lines(pending, [])
    assert lines[:2] == ["Job ID: 11", "Array Job ID: 9_2"]
    assert lines[-1] == "Efficiency not available for jobs in the PENDING state."
    assert seff.mem_mb("16000M") == 16000 and seff.mem_mb("2T") == 2 * 1024 ** 2


def test_why_lines_for_a_pending_job() -> None:
    job = {"job_id": "7", "user": "bob", "account": "ml", "partition": "gpu", "priority": 900,
           "state": "PENDING", "reason": "Priority", "expected_start": 4600.0}
    ahead = {**job, "job_id": "6", "user": "amy", "priority": 1000, "expected_start": None}
    reply = {"now": 1000.0, "job": job, "reason_text": "jobs of higher priority are ahead",
             "position": 2, "queue_length": 3, "ahead": [ahead],
             "factors": {"6": {"age": 100.0, "fairshare": 900.0},
                         "7": {"age": 50.0, "fairshare": 900.0, "nice": -50.0}},
             "ending": [{"job_id": "3", "user": "cy", "node_list": "n1", "gpus": 8,
                         "ends_by": None}]}
    stats_reply = {"first": {"count": 12, "median_abs": 90.0, "p90_abs": 3700.0}}
    lines = why.explain_lines(reply, stats_reply)
    assert lines[0] == "Job 7 (bob, account ml, partition gpu) is PENDING: Priority."
    assert "  Position: 2 of 3 jobs the scheduler considers in partition gpu (priority 900)." \
        in lines
    assert any("(in 01:00:00)" in line for line in lines)
    assert ("  Such forecasts were off by 00:01:30 (median) and 01:01:40 (90th percentile) "
            "over the last 12 jobs (kiln stats).") in lines
    table = lines[lines.index("  Jobs just ahead of it, then itself, with their weighted "
                              "priority factors:") + 1:][:3]
    assert table[0].split() == ["JOBID", "USER", "PRIORITY", "AGE", "FAIRSHARE", "NICE"]
    assert table[2].split() == ["7", "bob", "900", "50", "900", "-50"]
    assert lines[-1].endswith("8 GPUs on n1, ends by never (no time limit)")


def test_why_for_a_job_that_could_not_start_says_why() -> None:
    job = {"job_id": "9", "user": "bob", "account": "ml", "partition": "gpu", "priority": 1,
           "state": "FAILED", "end_time": 990.0,
           "reason": "launch failed: could not open output file /x/out: Permission denied"}
    assert why.explain_lines({"now": 1000.0, "job": job}, None) == [
        f"Job 9 (bob, account ml, partition gpu) is FAILED; it ended at {why.fmt_time(990.0)}.",
        "  Reason: launch failed: could not open output file /x/out: Permission denied"]
    job.update(state="COMPLETED", reason="None")
    assert len(why.explain_lines({"now": 1000.0, "job": job}, None)) == 1


def test_why_for_a_running_job_and_stats_without_data() -> None:
    job = {"job_id": "8", "user": "bob", "account": "ml", "partition": "gpu", "priority": 1,
           "state": "RUNNING", "reason": "None", "start_time": 940.0, "node_list": "n2"}
    assert why.explain_lines({"now": 1000.0, "job": job}, None) == [
        "Job 8 (bob, account ml, partition gpu) is RUNNING on n2 since "
        f"{why.fmt_time(940.0)} (00:01:00)."]
    empty = {"count": 0, "median_abs": 0.0, "p90_abs": 0.0, "mean": 0.0, "late": 0, "early": 0}
    lines = stats.stats_lines({"since": 0.0, "started": 4, "pending_with_forecast": 1,
                               "first": empty, "last": empty, "tolerance": 60.0,
                               "lead_median": 0.0})
    assert lines[-1] == "  no forecast has been checked against a start yet"


def test_sinfo_json_uses_slurms_keys() -> None:
    node = {"name": "n1", "cpus": 8, "alloc_cpus": 2, "memory_mb": 1000, "alloc_mem_mb": 10,
            "gpus": [{"index": 0, "model": "H100", "memory_mb": 80}], "alloc_gpus": 1,
            "state": "DRAIN", "state_display": "DRAINING", "partitions": ["gpu"],
            "features": ["nvlink"], "reason": "maint"}
    out = json_node(node)
    assert (out["hostname"], out["state"], out["state_flags"], out["idle_cpus"]) == \
        ("n1", "draining", ["DRAIN"], 6)
    assert (out["gres"], out["gres_used"], out["real_memory"]) == ("gpu:h100:1", "gpu:h100:1",
                                                                   1000)
    part = json_partition({"name": "gpu", "nodes": ["n1"], "default": True, "max_time": 3600,
                           "default_time": None}, [node])
    assert (part["nodes"], part["flags"], part["max_time_limit"], part["total_gpus"]) == \
        ("n1", ["default"], 60, 1)


def test_why_adds_the_p50_p90_start_and_the_shapes_that_start_sooner() -> None:
    job = {"job_id": "7", "user": "bob", "account": "ml", "partition": "gpu", "priority": 900,
           "state": "PENDING", "reason": "Resources", "expected_start": 1000.0 + 4 * 3600}
    reply = {"now": 1000.0, "job": job, "reason_text": "waiting for resources", "position": 1,
             "queue_length": 1, "forecast": {"p50": 1000.0 + 3 * 3600, "p90": 1000.0 + 5 * 3600},
             "advice": [{"change": "--gres=gpu:4 instead of 8", "start": 1000.0 + 25 * 60},
                        {"change": "-p big instead of gpu", "start": 900.0}]}
    lines = why.explain_lines(reply, None)
    assert (f"  Forecast from recent run times: p50 start {why.fmt_time(1000.0 + 3 * 3600)} "
            f"(in ~3.0 h), p90 start {why.fmt_time(1000.0 + 5 * 3600)} (in ~5.0 h).") in lines
    assert "  With --gres=gpu:4 instead of 8: starts in ~25 min, not in ~3.0 h." in lines
    assert "  With -p big instead of gpu: starts now, not in ~3.0 h." in lines


def test_outlook_lines_without_a_forecast_and_rough_durations() -> None:
    assert outlook.outlook_lines({"now": 0.0}) == []
    assert outlook.outlook_lines({"now": 0.0, "forecast": None, "advice": [
        {"change": "-N 1 instead of 2", "start": 120.0}]}) == [
        "with -N 1 instead of 2: starts in ~2 min, not planned yet as asked"]
    assert [outlook.about(s) for s in (10, 3000, 5400, 40_000, 200_000)] == [
        "~1 min", "~50 min", "~1.5 h", "~11 h", "~2.3 d"]


def test_stats_report_the_calibration_of_the_p90() -> None:
    empty = {"count": 0, "median_abs": 0.0, "p90_abs": 0.0, "mean": 0.0, "late": 0, "early": 0}
    reply = {"since": 0.0, "started": 4, "pending_with_forecast": 1, "first": empty,
             "last": empty, "tolerance": 60.0, "lead_median": 0.0,
             "quantiles": {"count": 20, "within_p90": 0.95, "p50_median_abs": 90.0,
                           "p90_median_abs": 600.0}}
    assert stats.stats_lines(reply)[-3:] == [
        "p50/p90 starts (kiln why, sbatch --test-only), first published, 20 jobs:",
        "  started by their p90: 95.0% (target 90 %)",
        "  median |err|: p50 00:01:30, p90 00:10:00"]
