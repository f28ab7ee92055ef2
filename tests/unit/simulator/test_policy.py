"""The policy knobs, the GPU mapping and the fair-share usage the simulator feeds the core."""

from __future__ import annotations

import math

import pytest

from kiln.config import ConfigError, SchedulerConfig
from schedd.scheduler.snapshot import PendingJob
from simulator.machine import gpu_cluster, pool
from simulator.policy import policy_config
from simulator.swf import TraceJob
from simulator.usage import UsageLedger


def test_textbook_policies():
    fcfs, easy, cons = (policy_config(p) for p in ("fcfs", "easy", "conservative"))
    assert not fcfs.backfill
    assert easy.backfill and easy.bf_max_reservations == 1
    assert cons.backfill and cons.bf_max_reservations >= 1_000_000
    for cfg in (fcfs, easy, cons):
        assert cfg.bf_resolution == 1 and cfg.fill == "priority" and not cfg.predict_runtime
        assert cfg.weight_age == cfg.weight_fairshare == cfg.weight_qos == 0
        assert cfg.bf_window >= 100 * 365 * 86400


def test_kiln_policy_is_the_default_in_exact_seconds():
    default = SchedulerConfig()
    kiln = policy_config("kiln")
    assert kiln.bf_resolution == 1
    assert (kiln.bf_max_reservations, kiln.weight_fairshare, kiln.fill) == (
        default.bf_max_reservations, default.weight_fairshare, default.fill)


def test_kiln_policy_from_a_config_file(tmp_path):
    conf = tmp_path / "kiln.toml"
    conf.write_text("[scheduler]\nbf_max_reservations = 7\n")
    assert (policy_config("kiln", conf).bf_max_reservations,
            policy_config("kiln", conf).bf_resolution) == (7, 1)
    conf.write_text("[scheduler]\nbf_resolution = 30\n")
    assert policy_config("kiln", conf).bf_resolution == 30
    conf.write_text("[scheduler]\nbf_typo = 1\n")
    with pytest.raises(ConfigError, match="unknown key 'bf_typo'"):
        policy_config("kiln", conf)


def test_unknown_policy():
    with pytest.raises(ValueError, match="unknown policy 'sjf'"):
        policy_config("sjf")


@pytest.mark.parametrize(
    ("procs", "shape"),
    [(1, (1, 1)), (8, (1, 8)), (9, (2, 5)), (12, (2, 6)), (17, (3, 6)), (32, (4, 8)), (33, None)],
)
def test_gpu_shapes(procs, shape):
    machine = gpu_cluster(max_procs=32, nodes=None, gpus_per_node=8)
    assert len(machine.nodes) == 4
    got = machine.shape(procs)
    assert (None if got is None else (got.num_nodes, got.per_node)) == shape


def test_pool_is_one_node():
    machine = pool(256)
    assert [(n.cpus, len(n.gpus)) for n in machine.nodes] == [(256, 0)]
    assert machine.capacity == 256
    assert machine.shape(256).units == 256 and machine.shape(257) is None


def test_pending_job_view():
    job = TraceJob(job_id=4, submit=20, run=50, procs=12, estimate=50.5, user=3, group=-1)
    machine = gpu_cluster(32, nodes=None, gpus_per_node=8)
    view = machine.pending(job, machine.shape(job.procs))
    assert (view.num_nodes, view.gpus_per_node, view.cpus_per_node) == (2, 6, 6)
    assert (view.time_limit, view.submit_time, view.user, view.account) == (51, 20, "u3", "default")
    assert view.name == "0000000004"


def _job(job_id, cpus, user="u1", account="g1"):
    return PendingJob(job_id=job_id, user=user, account=account, cpus_per_node=cpus)


def test_usage_decays_with_the_half_life():
    h = 1000
    ledger = UsageLedger(SchedulerConfig(decay_half_life=h))
    ledger.start(_job(1, cpus=2), now=0)
    rate, lam = 2.0, math.log(2) / h
    (_, user) = ledger.views(h)
    assert user.usage == pytest.approx(rate * (1 - 0.5) / lam)  # charged while running
    ledger.end(1, now=h)
    (_, user) = ledger.views(2 * h)
    assert user.usage == pytest.approx(rate * 0.5 / lam * 0.5)  # halved one half-life later
    assert (user.account, user.user) == ("g1", "u1")


def test_usage_tree_and_anonymous_jobs():
    ledger = UsageLedger(SchedulerConfig())
    ledger.start(_job(1, 4, "u1", "g1"), now=0)
    ledger.start(_job(2, 4, "u2", "g1"), now=0)
    ledger.start(_job(3, 4, "", ""), now=0)  # unknown user: no association
    views = ledger.views(10)
    assert [(v.account, v.user) for v in views] == [("g1", ""), ("g1", "u1"), ("g1", "u2")]
    assert views[1].usage == pytest.approx(views[2].usage) and views[1].usage > 0
    ledger.end(3, now=10)  # ending an unassociated job is harmless
