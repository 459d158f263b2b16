"""console.speed: the workers' breakdown records put together, the verdict's words and the scaling efficiency."""

from __future__ import annotations

import pytest

from console import speed


def record(step=0.02, compute=0.01, reduce=0.002, pipeline=0.001, batch=64, cpu=None, **more) -> dict:
    out = {"type": "breakdown", "ask": "a", "at_step": 100, "step_time": step, "compute_time": compute,
           "all_reduce_time": reduce, "input_time": pipeline, "input": "dataset", "batch": batch, "replicas": 2,
           "local_replicas": 1, "gradient_bytes": 1_000_000, "cpu": cpu or {"used": 1.0, "cores": 2, "allowed": 2}}
    out.update(more)
    return out


def test_the_parts_of_each_step_add_up_to_it():
    rows = speed.breakdowns({"worker-0": record(step=0.1, pipeline=0.002, compute=0.005),
                             "worker-1": record(step=0.1, pipeline=0.1, compute=0.005)})
    for row in rows:
        assert sum(getattr(row, part) for part in speed.PARTS) == pytest.approx(row.step)
    fast, slow = rows
    assert slow.input == pytest.approx(0.1 - 0.005 - 0.002)  # its pipeline beyond its compute and all-reduce
    assert fast.input == 0 and fast.peers == pytest.approx(slow.input)  # the other one waits for it


def test_a_slow_pipeline_on_one_worker_is_input_bound_there_with_its_fix():
    verdict = speed.explain("a", {"worker-0": record(step=0.1, pipeline=0.002, compute=0.005),
                                  "worker-1": record(step=0.1, pipeline=0.1, compute=0.005)})
    assert verdict.kind == speed.INPUT_BOUND
    finding = verdict.findings[0]
    assert finding.task == "worker-1"
    assert finding.words.startswith("input-bound on worker-1: 93% of each step waits for its input pipeline, which "
                                    "gives 10 batches/s where training needs 14")  # 1 / (100 ms - 93 ms)
    assert "num_parallel_calls=tf.data.AUTOTUNE" in finding.words and ".cache()" in finding.words
    assert len(verdict.findings) == 1  # the other worker's wait is its, not a straggler of its own


def test_a_worker_that_computes_slower_is_the_straggler_and_its_cgroup_is_named():
    limited = {"used": 0.3, "cores": 2, "allowed": 2, "limit": 0.3, "throttled": 0.9}
    verdict = speed.explain("a", {"worker-0": record(step=0.06, compute=0.004),
                                  "worker-1": record(step=0.06, compute=0.016, cpu=limited)})
    assert verdict.kind == speed.STRAGGLER
    words = verdict.findings[0].words
    assert words.startswith("worker-1 is a straggler: its compute takes 16 ms a step, its peers' 4.0 ms, and they "
                            "wait 72% of each step for it: its cgroup limits it to 0.3 CPU (throttled in 90% of "
                            "periods)"), words


@pytest.mark.parametrize("busy, cause", [
    (0.6, "it shares h0 with worker-0, which computes faster: the host's CPU was not shared evenly"),
    (1.0, "other work kept 0.7 cores of h0 busy beside the run's workers while it was measured — stop that work")])
def test_a_straggler_beside_a_peer_on_its_own_host_is_no_slower_machine(busy, cause):
    """Two workers on one host (the CI's 2 cores): one computes 2x slower than the other on the same CPU. That is
    no slower machine: the host's CPU was shared unevenly, or other work beside the run's held it."""
    def cpu(used):
        return {"used": used, "cores": 2, "allowed": 2, "host_busy": busy}

    verdict = speed.explain("a", {"worker-0": record(step=0.06, compute=0.004, cpu=cpu(0.8)),
                                  "worker-1": record(step=0.06, compute=0.016, cpu=cpu(0.5))},
                            hosts={"worker-0": "h0", "worker-1": "h0"})
    words = verdict.findings[0].words
    assert verdict.kind == speed.STRAGGLER and cause in words and "a slower CPU" not in words, words


@pytest.mark.parametrize("cpu, cause", [
    ({"cores": 4, "allowed": 4, "others": [{"pid": 4242, "name": "stress", "cpu": 1.0}]},
     "its host's CPU is busy with another process: pid 4242 (stress) uses 1.0 CPU — stop it"),
    ({"cores": 4, "allowed": 1}, "it may use only 1 of its host's 4 cores"),
    ({"cores": 4, "allowed": 4, "host_busy": 0.97}, "its host's CPU is saturated (97% busy)"),
    ({"cores": 4, "allowed": 4, "limit": 2.0, "throttled": 0.0}, "a slower CPU or GPU"),  # a limit not reached
    ({"cores": 4, "allowed": 4, "others": [{"pid": 7, "name": "idle", "cpu": 0.1}]}, "a slower CPU or GPU"),
])
def test_what_held_a_stragglers_cpu_is_said(cpu, cause):
    verdict = speed.explain("a", {"worker-0": record(step=0.06, compute=0.004),
                                  "worker-1": record(step=0.06, compute=0.016, cpu=cpu)})
    assert verdict.kind == speed.STRAGGLER and cause in verdict.findings[0].words, verdict.findings[0].words


def test_workers_that_wait_on_the_all_reduce_are_communication_bound():
    verdict = speed.explain("a", {f"worker-{i}": record(step=0.06, compute=0.005, reduce=0.05) for i in range(2)})
    assert verdict.kind == speed.COMMUNICATION_BOUND
    assert verdict.findings[0].words.startswith("communication-bound: 83% of each step waits on the all-reduce (1 MB "
                                                "of gradients in 50 ms) — a larger batch per replica")


OTHERS = [{"pid": 4242, "name": "python", "cpu": 1.4}, {"pid": 77, "name": "gzip", "cpu": 0.1}]


@pytest.mark.parametrize("cpu, busy", [
    ({"others": OTHERS}, "other processes used the hosts' CPU (pid 4242 (python) 1.4 CPU)"),
    ({"host_busy": 0.97}, "other work kept 1.6 cores of h0 busy beside the run's workers")])
def test_an_all_reduce_wait_on_busy_hosts_says_so_beside_the_advice(cpu, busy):
    """Another training on the workers' hosts (the CI's own load beside the suite): a worker it holds back keeps its
    peers in the all-reduce. The verdict keeps the advice (a slow link may be there too) and says what else held
    the hosts (its processes named once, or the cores busy beyond the run's workers), and to ask again when quiet."""
    verdict = speed.explain("a", {"worker-0": record(step=0.06, compute=0.005, reduce=0.05,
                                                     cpu={"used": 0.3, "cores": 2, "allowed": 2, **cpu}),
                                  "worker-1": record(step=0.06, compute=0.005, reduce=0.05,
                                                     cpu={"used": 0.34, "cores": 2, "allowed": 2})},
                            hosts={"worker-0": "h0", "worker-1": "h1"})
    assert verdict.kind == speed.COMMUNICATION_BOUND
    assert verdict.findings[0].words == (
        "communication-bound: 83% of each step waits on the all-reduce (1 MB of gradients in 50 ms) — a larger batch "
        "per replica (fewer all-reduces per example), RING or NCCL (training.communication), fewer hosts, or a faster "
        f"link between them; but {busy} while it was measured: a worker they hold back keeps its peers waiting in the "
        "all-reduce too — ask again when the hosts are quiet, before changing anything")


def test_workers_on_one_host_that_wait_on_the_all_reduce_are_told_no_link_is_in_it():
    """Every worker on one host: the all-reduce runs over its loopback, and what keeps a worker in it is a peer the
    shared CPU holds back; the advice is a worker a host, never a faster link or fewer hosts."""
    verdict = speed.explain("a", {f"worker-{i}": record(step=0.06, compute=0.005, reduce=0.05) for i in range(2)},
                            hosts={"worker-0": "here", "worker-1": "here"})
    assert verdict.kind == speed.COMMUNICATION_BOUND
    assert verdict.findings[0].words == (
        "communication-bound: 83% of each step waits on the all-reduce (1 MB of gradients in 50 ms) — its workers "
        "share here, no link between hosts is in it: a worker the shared CPU holds back keeps its peers waiting in "
        "the all-reduce; a worker a host, or a larger batch per replica (fewer all-reduces per example)")


def test_a_host_busy_with_the_runs_own_workers_alone_is_no_busy_host():
    """Two workers that keep their 2-core host busy between them: no other work held it, and the verdict says
    nothing of it (it would ask to wait for a quiet host that never comes)."""
    cpu = {"used": 0.95, "cores": 2, "allowed": 2, "host_busy": 0.98}
    verdict = speed.explain("a", {f"worker-{i}": record(step=0.06, compute=0.005, reduce=0.05, cpu=cpu)
                                  for i in range(2)}, hosts={"worker-0": "h0", "worker-1": "h0"})
    assert verdict.kind == speed.COMMUNICATION_BOUND and "while it was measured" not in verdict.findings[0].words


def test_a_run_whose_workers_compute_is_healthy_and_its_scaling_is_said():
    verdict = speed.explain("a", {f"worker-{i}": record(step=0.015, compute=0.01, reduce=0.003) for i in range(2)})
    assert verdict.kind == speed.HEALTHY
    assert verdict.findings[0].words.startswith("healthy: compute-bound — compute is 67% of each step")
    # 64 examples / 15 ms together; alone each would train its 32 in its 10 ms compute.
    assert verdict.global_rate == pytest.approx(64 / 0.015)
    assert verdict.efficiency == pytest.approx((64 / 0.015) / (2 * 32 / 0.010))
    assert verdict.speedup == pytest.approx(2 * verdict.efficiency)
    assert verdict.lines()[-1] == "scaling: 1.33× on 2 workers, 67% of linear"


def test_a_small_model_is_healthy_and_told_where_its_step_goes():
    verdict = speed.explain("a", {f"worker-{i}": record(step=0.03, compute=0.004, reduce=0.004) for i in range(2)})
    assert verdict.kind == speed.HEALTHY
    assert "the update and the framework's own work are 73% of each step" in verdict.findings[0].words


def test_a_worker_that_did_not_answer_is_named_and_nothing_measured_says_so():
    verdict = speed.explain("a", {"worker-0": record()}, missing=["worker-1"])
    assert verdict.findings[-1].words == "not measured: worker-1 did not answer in time"
    assert verdict.scaling_words() == ""  # one worker measured
    assert speed.explain("a", {}).kind == speed.UNMEASURED
    failed = speed.explain("a", {"worker-0": {"ask": "a", "problems": ["compute: ValueError: no"]}})
    assert failed.kind == speed.UNMEASURED and "compute: ValueError: no" in failed.findings[0].words


def test_an_ask_is_answered_once_every_task_has_and_overdue_after_the_time_allowed():
    asks = speed.Asks()
    asks.start("a", ["worker-0", "worker-1"], 100)
    assert asks.answered("worker-0", record()) is None
    assert asks.answered("worker-0", record(ask="other")) is None  # another ask's
    assert asks.answered("ps-0", record()) is None                  # a task not asked
    verdict = asks.answered("worker-1", record())
    assert verdict is not None and verdict.at_step == 100 and asks.get("a") is None
    late = asks.start("b", ["worker-0", "worker-1"], 200)
    asks.answered("worker-0", record(ask="b"))
    overdue = asks.overdue(now=late.first + speed.ANSWER_SECONDS)
    assert [v.missing for v in overdue] == [["worker-1"]] and asks.get("b") is None
    assert overdue[0].findings[-1].words == "not measured: worker-1 did not answer in time"


def test_a_worker_that_could_not_measure_says_why():
    verdict = speed.explain("a", {"worker-0": {"ask": "a", "problems": ["not measured: no flag"]},
                                  "worker-1": {"ask": "a", "problems": ["not measured: no flag"]}})
    assert verdict.kind == speed.UNMEASURED and "not measured: no flag" in verdict.findings[0].words


def test_input_not_measured_and_a_part_that_failed_are_said_beside_the_verdict():
    verdict = speed.explain("a", {"worker-0": record(input=None, pipeline=None),
                                  "worker-1": record(problems=["compute: ValueError: odd"])})
    assert verdict.kind == speed.HEALTHY
    words = [f.words for f in verdict.findings]
    assert any(w.startswith("input not measured on worker-0 (a generator") for w in words)
    assert "not measured: compute: ValueError: odd" in words


def test_one_worker_has_no_scaling_to_say():
    verdict = speed.explain("a", {"worker-0": record()})
    assert verdict.scaling_words() == "" and not verdict.lines()[-1].startswith("scaling")


def test_the_table_gives_each_workers_parts():
    verdict = speed.explain("a", {"worker-0": record(step=0.02, compute=0.01, reduce=0.002)})
    assert verdict.table() == ["worker-0  step 20 ms: waiting for input 0%, compute 50%, all-reduce 10%, "
                               "waiting for slower peers 0%, update and framework 40%"]


def test_an_ask_whose_task_ended_before_answering_is_closed_with_why():
    asks = speed.Asks()
    asks.start("a", ["worker-0", "worker-1"], 100)
    asks.answered("worker-0", record())
    assert asks.ended({"worker-0"}) == []  # it answered
    (verdict,) = asks.ended({"worker-1"})
    assert verdict.missing == ["worker-1"] and asks.get("a") is None
    assert verdict.findings[-1].words == ("not measured: worker-1 ended before it answered (the run failed or was "
                                          "stopped)")


def test_the_system_lane_adds_a_host_short_of_memory_and_idle_gpus():
    systems = {"worker-0": {"memory_total_bytes": 16 * 2**30, "memory_available_bytes": 2**29,
                            "swap_used_bytes": 3 * 2**30, "gpus": [], "tasks": {}},
               "worker-1": {"memory_total_bytes": 16 * 2**30, "memory_available_bytes": 8 * 2**30,
                            "gpus": [{"index": 0, "utilization_percent": 90.0},
                                     {"index": 1, "utilization_percent": 12.0}],
                            "tasks": {"worker-1": {"gpus": [1]}}}}
    verdict = speed.explain("a", {f"worker-{i}": record(step=0.015, compute=0.01, reduce=0.001) for i in range(2)},
                            systems=systems)
    assert verdict.kind == speed.HEALTHY  # notes are beside the verdict
    notes = [f.words for f in verdict.findings if f.kind == speed.NOTE]
    assert notes == [
        "worker-0's host is short of memory (3% of its memory available, 3.0 GB swapped): its steps may wait on the "
        "disk — fewer tasks on that host, a smaller batch, or more memory",
        "worker-1's GPUs were 12% busy while compute was 67% of its step: they wait on the host between kernels — a "
        "larger batch per replica, or jit_compile=True"]


def test_workers_that_share_a_host_are_said_to():
    verdict = speed.explain("a", {f"worker-{i}": record() for i in range(3)},
                            hosts={"worker-0": "here", "worker-1": "here", "worker-2": "there"})
    notes = [f.words for f in verdict.findings if f.kind == speed.NOTE]
    assert notes == ["worker-0 and worker-1 share here: each is measured at its share of that host (the scaling "
                     "figure too); one worker alone there would have it all — a worker a host scales better"]


def test_an_all_reduce_that_is_not_the_largest_part_is_no_communication_bound():
    # 40 % all-reduce, but 50 % update and framework: a small model on a quick link
    verdict = speed.explain("a", {f"worker-{i}": record(step=0.05, compute=0.005, reduce=0.02) for i in range(2)})
    assert verdict.kind == speed.HEALTHY, verdict.lines()
