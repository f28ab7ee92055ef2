"""--gres=shard:N as the commands parse it, shards_per_gpu in kiln.toml, the job's env."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.core.options import OptionError
from cli.submit import SBATCH_HANDLERS
from kiln import config as kconfig
from kiln.model import Job, NodeAllocation
from kiln.slurm.gres import GresError, take_shares
from schedd.domain.jobenv import job_environment


def test_take_shares() -> None:
    assert take_shares(["shard:3", "nic:1"]) == ({"shard": 3}, ["nic:1"])
    assert take_shares(["shard"]) == ({"shard": 1}, [])
    for bad in ("shard:0", "shard:x", "shard:a100:x", "shard:"):
        with pytest.raises(GresError):
            take_shares([bad])


def test_sbatch_gres_shard() -> None:
    settings: dict = {}
    SBATCH_HANDLERS["gres"](settings, "shard:2")
    assert settings["shards_per_node"] == 2 and settings["gpus_per_node"] == 0
    assert "gres" not in settings  # not an unknown gres: check_request lets it through
    both: dict = {}
    SBATCH_HANDLERS["gres"](both, "gpu:1,shard:3")
    assert (both["gpus_per_node"], both["shards_per_node"]) == (1, 3)
    with pytest.raises(OptionError, match="Invalid --gres specification"):
        SBATCH_HANDLERS["gres"]({}, "shard:x")


def test_shards_per_gpu_in_kiln_toml(tmp_path: Path) -> None:
    cfg = kconfig.from_dict({"home": str(tmp_path), "agent": {"shards_per_gpu": 4},
                             "partition": [{"name": "gpu", "shards_per_gpu": 8}]})
    assert cfg.agent.shards_per_gpu == 4 and cfg.partitions[0].shards_per_gpu == 8
    for bad in (-1, "4", 5000, True):
        with pytest.raises(kconfig.ConfigError, match="shards_per_gpu"):
            kconfig.from_dict({"home": str(tmp_path), "agent": {"shards_per_gpu": bad}})


def test_the_job_sees_the_gpu_of_its_shards() -> None:
    job = Job(id=7, shards_per_node=2,
              allocation=[NodeAllocation("n1", 1, 0, [], [0], {1: 2}, 4)])
    env = job_environment(job, job.allocation[0], 0, "kiln")
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["SLURM_SHARDS_ON_NODE"] == "2"
    assert "SLURM_JOB_GPUS" not in env and env["SLURM_GPUS_ON_NODE"] == "0"
    plain = Job(id=8, allocation=[NodeAllocation("n1", 1, 0, [], [0])])
    env = job_environment(plain, plain.allocation[0], 0, "kiln")
    assert "CUDA_VISIBLE_DEVICES" not in env and "SLURM_SHARDS_ON_NODE" not in env


def test_an_allocation_with_shards_goes_over_the_wire_and_back() -> None:
    job = Job(id=7, allocation=[NodeAllocation("n1", 1, 0, [], [0], {1: 2}, 4)])
    back = Job.from_wire(job.to_wire())
    assert back.allocation[0].shards == {1: 2} and back.allocation[0].shards_per_gpu == 4
    assert back.allocation[0].gpu_share == 0.5


def test_the_ledger_keeps_a_runs_shards(empty_ledger: str) -> None:
    from schedd.ledger.migrate import upgrade
    from schedd.ledger.store import Store

    upgrade(empty_ledger)
    store = Store(empty_ledger)
    try:
        job = Job(id=3, shards_per_node=2,
                  allocation=[NodeAllocation("n1", 1, 0, [], [0], {1: 2}, 4)])
        store.insert_jobs([job])
        [back] = store.load_jobs(active_only=False)
        assert back.shards_per_node == 2
        assert back.allocation[0].shards == {1: 2} and back.allocation[0].shards_per_gpu == 4
    finally:
        store.close()


def test_a_nodes_own_shards_per_gpu_wins_over_its_partitions() -> None:
    from types import SimpleNamespace

    from kiln.model import GPU, Node, Partition
    from schedd.state import State

    parts = SimpleNamespace(partitions={"cpu": Partition("cpu"),
                                        "gpu": Partition("gpu", shards_per_gpu=8)})
    gpu = [GPU(0, "u0", "A100", 80_000)]
    assert State.shards_per_gpu(parts, Node("n", 4, 100, gpu, partitions=["cpu", "gpu"])) == 8
    assert State.shards_per_gpu(parts, Node("n", 4, 100, gpu, partitions=["gpu"],
                                            shards_per_gpu=2)) == 2
    assert State.shards_per_gpu(parts, Node("n", 4, 100, [], partitions=["gpu"])) == 0
