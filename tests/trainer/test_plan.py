"""The plan's rules: strategy choice, replicas per worker, batches, autoshard (no TensorFlow)."""

import math

import pytest

from trainer.tf_config import ClusterConfig, make_tf_config, parse_tf_config
from trainer.plan import (ConfigError, GlobalSplit, check_autoshard, choose_strategy, observed_batch_plan,
                          plan_batches,
                          replicas_per_worker, strategy_for)


def test_batch_plan_arithmetic_and_lr_rules():
    kw = dict(per_replica_batch=32, num_workers=2, replicas_per_worker=2, num_examples=1437,
              steps_per_epoch=None, base_learning_rate=0.001)
    plan = plan_batches(lr_rule="linear", **kw)
    assert (plan.num_replicas, plan.per_worker_batch, plan.global_batch) == (4, 64, 128)
    assert plan.steps_per_epoch == 1437 // 128
    assert plan.learning_rate == pytest.approx(0.004)
    assert plan_batches(lr_rule="sqrt", **kw).learning_rate == pytest.approx(0.001 * math.sqrt(4))
    assert plan_batches(lr_rule="none", **kw).learning_rate == pytest.approx(0.001)
    assert plan_batches(lr_rule="none", **{**kw, "steps_per_epoch": 7}).steps_per_epoch == 7
    from_global = plan_batches(lr_rule="none", **{**kw, "global_batch": 256})
    assert (from_global.per_replica_batch, from_global.global_batch) == (64, 256)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"per_replica_batch": 0}, "--per-replica-batch is 0; it must be from 1 to 1048576"),
        ({"per_replica_batch": 1000}, "is larger than the 1437 training examples; lower --per-replica-batch to at most 359"),
        ({"num_examples": None}, "dataset's size is unknown"),
        ({"steps_per_epoch": 0}, "--steps-per-epoch is 0"),
        ({"base_learning_rate": -1.0}, "--learning-rate is -1.0; it must be a number above 0 and at most 10"),
        ({"global_batch": 130}, "--global-batch 130 does not split evenly over 4 replicas; use a multiple of 4 "
                                "(e.g. 128 or 132) or give the per-replica batch instead"),
        ({"global_batch": 3}, "--global-batch 3 does not split evenly over 4 replicas; use a multiple of 4 (e.g. 4)"),
        ({"global_batch": 0}, "--global-batch is 0; it must be from 1 to 1048576"),
    ],
)
def test_batch_plans_that_cannot_work(overrides, expected):
    kw = dict(per_replica_batch=32, num_workers=2, replicas_per_worker=2, num_examples=1437,
              steps_per_epoch=None, base_learning_rate=0.001, lr_rule="linear")
    with pytest.raises(ConfigError) as err:
        plan_batches(**{**kw, **overrides})
    assert expected in str(err.value)


def test_strategy_choice():
    one = ClusterConfig()
    two = parse_tf_config(make_tf_config({"worker": ["a:1000", "b:1000"]}, "worker", 0))
    assert choose_strategy("auto", one, 1) == "default"
    assert choose_strategy("auto", one, 2) == "mirrored"
    assert choose_strategy("auto", two, 1) == "multi_worker_mirrored"
    assert choose_strategy("multi_worker_mirrored", one, 1) == "multi_worker_mirrored"
    with pytest.raises(ConfigError, match="--strategy mirrored trains on one host, but TF_CONFIG has 2"):
        choose_strategy("mirrored", two, 2)
    pss = {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]}
    for role in ("chief", "worker", "ps"):  # auto picks it for every role when the cluster has a ps
        assert choose_strategy("auto", parse_tf_config(make_tf_config(pss, role, 0)), 1) == "parameter_server"
    with pytest.raises(ConfigError, match="needs exactly one chief task"):
        choose_strategy("auto", parse_tf_config(make_tf_config({"worker": ["a:1"], "ps": ["b:1"]}, "worker", 0)), 1)
    with pytest.raises(ConfigError, match="needs at least one ps task"):
        choose_strategy("parameter_server", parse_tf_config(make_tf_config({"chief": ["a:1"], "worker": ["b:1"]},
                                                                          "worker", 0)), 1)
    with pytest.raises(ConfigError, match="--strategy multi_worker_mirrored has no use for the cluster's ps tasks"):
        choose_strategy("multi_worker_mirrored", parse_tf_config(make_tf_config(pss, "worker", 0)), 1)


def test_an_asynchronous_step_is_one_workers_batch():
    plan = plan_batches(per_replica_batch=16, num_workers=4, replicas_per_worker=2, num_examples=1000,
                        steps_per_epoch=None, base_learning_rate=0.01, lr_rule="linear", asynchronous=True)
    assert (plan.global_batch, plan.num_replicas, plan.steps_per_epoch) == (32, 2, 31)
    assert plan.learning_rate == pytest.approx(0.02)  # scaled by the worker's replicas, not by the workers


def test_autoshard_rules():
    check_autoshard("data", True, "digits", 2)
    check_autoshard("off", True, "digits", 1)
    check_autoshard("file", False, "mine", 2)
    with pytest.raises(ConfigError, match="--autoshard file needs a dataset read from files"):
        check_autoshard("file", True, "digits", 2)
    with pytest.raises(ConfigError, match="would give every worker the same digits examples"):
        check_autoshard("off", True, "digits", 2)


def test_auto_picks_by_workers_and_devices_and_other_requests_stand():
    assert strategy_for("auto", 1, 1) == "default" and strategy_for("auto", 1, 2) == "mirrored"
    assert strategy_for("auto", 2, 8) == "multi_worker_mirrored"
    assert strategy_for("mirrored", 2, 1) == "mirrored"  # choose_strategy is the one that refuses it


def test_replicas_per_worker():
    assert replicas_per_worker("mirrored", 0, 3) == 3 and replicas_per_worker("mirrored", 2, 3) == 2
    assert replicas_per_worker("multi_worker_mirrored", 0, 3) == 1
    assert replicas_per_worker("multi_worker_mirrored", 4, 1) == 4
    assert replicas_per_worker("default", 4, 4) == 1


def test_a_global_batch_splits_over_the_replicas_or_names_the_nearest_that_do():
    assert (GlobalSplit(128, 4).even, GlobalSplit(128, 4).per_replica) == (True, 32)
    assert not GlobalSplit(130, 4).even and GlobalSplit(130, 4).nearest_even == (128, 132)
    assert GlobalSplit(3, 4).nearest_even == (4,)


@pytest.mark.parametrize("strategy, replicas, cluster, batch, expected", [
    ("multi_worker_mirrored", 2, {"worker": ["a:1", "b:1"]}, 64, (2, 1, 32, 32)),
    ("multi_worker_mirrored", 4, {"chief": ["a:1"], "worker": ["b:1"]}, 64, (2, 2, 16, 32)),
    ("mirrored", 2, {"worker": ["a:1", "b:1"]}, 64, (1, 2, 32, 64)),  # each task trains on its own
    ("parameter_server", 1, {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]}, 64, (2, 1, 64, 64)),
])
def test_a_scripts_observed_batch_plan(strategy, replicas, cluster, batch, expected):
    plan = observed_batch_plan(strategy, replicas, cluster, batch)
    assert (plan["num_workers"], plan["replicas_per_worker"], plan["per_replica_batch"],
            plan["per_worker_batch"]) == expected
    assert plan["global_batch"] == batch and plan.get("asynchronous", False) == (strategy == "parameter_server")
    assert "global_batch" not in observed_batch_plan(strategy, replicas, cluster, None)
