"""--gres=mps:N as the commands parse it, mps_per_gpu in kiln.toml, the job's env, the wire,
the ledger and the commands' views of a node's MPS."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from cli.core.formats import job_tres_per_node
from cli.core.options import OptionError
from cli.nodeview import node_gres, node_gres_used
from cli.submit import SBATCH_HANDLERS
from kiln import config as kconfig
from kiln.model import GPU, Job, Node, NodeAllocation, Partition
from kiln.slurm.gres import GresError, take_shares, thread_percentage
from schedd.domain.jobenv import job_environment, step_environment
from schedd.state import State


def test_take_shares_mps() -> None:
    assert take_shares(["mps:50", "nic:1"]) == ({"mps": 50}, ["nic:1"])
    for bad in (["mps:0"], ["mps:x"], ["mps:"], ["shard:1", "mps:50"]):
        with pytest.raises(GresError):
            take_shares(bad)


def test_sbatch_gres_mps() -> None:
    settings: dict = {}
    SBATCH_HANDLERS["gres"](settings, "mps:50")
    assert (settings["mps_per_node"], settings["shards_per_node"]) == (50, 0)
    assert settings["gpus_per_node"] == 0 and "gres" not in settings
    with pytest.raises(OptionError, match="Invalid --gres specification"):
        SBATCH_HANDLERS["gres"]({}, "mps:x")
    # a GPU whole and MPS: left to schedd, which refuses it as Slurm does (unknown gres)
    both: dict = {}
    SBATCH_HANDLERS["gres"](both, "gpu:1,mps:100")
    assert both["gres"] == "mps:100" and both["mps_per_node"] == 0


def test_thread_percentage_is_slurms_formula() -> None:
    assert thread_percentage(50, 100) == 50
    assert thread_percentage(1, 3) == 33
    assert thread_percentage(250, 1000) == 25


def test_mps_per_gpu_in_kiln_toml(tmp_path: Path) -> None:
    cfg = kconfig.from_dict({"home": str(tmp_path), "agent": {"mps_per_gpu": 100},
                             "partition": [{"name": "gpu", "mps_per_gpu": 200}]})
    assert cfg.agent.mps_per_gpu == 100 and cfg.partitions[0].mps_per_gpu == 200
    for bad in (-1, "100", 5000, True):
        with pytest.raises(kconfig.ConfigError, match="mps_per_gpu"):
            kconfig.from_dict({"home": str(tmp_path), "agent": {"mps_per_gpu": bad}})


def test_a_nodes_own_mps_per_gpu_wins_over_its_partitions() -> None:
    parts = SimpleNamespace(partitions={"gpu": Partition("gpu", mps_per_gpu=100)})
    gpu = [GPU(0, "u0", "A100", 80_000)]
    assert State.mps_per_gpu(parts, Node("n", 4, 100, gpu, partitions=["gpu"])) == 100
    assert State.mps_per_gpu(parts, Node("n", 4, 100, gpu, partitions=["gpu"],
                                         mps_per_gpu=50)) == 50
    assert State.mps_per_gpu(parts, Node("n", 4, 100, [], partitions=["gpu"])) == 0
    assert State.shards_per_gpu(parts, Node("n", 4, 100, gpu, partitions=["gpu"])) == 0


def _mps_job() -> Job:
    return Job(id=7, mps_per_node=50,
               allocation=[NodeAllocation("n1", 1, 0, [], [0], {1: 50}, 100, "mps")])


def test_the_job_sees_its_gpu_and_its_thread_percentage() -> None:
    job = _mps_job()
    env = job_environment(job, job.allocation[0], 0, "kiln")
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["SLURM_JOB_GPUS"] == "1"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert "SLURM_SHARDS_ON_NODE" not in env
    step = step_environment({}, job, 0, 0, "n1", 1, [1], [0], ["n1"], [1], 1)
    assert step["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50" and step["SLURM_JOB_GPUS"] == "1"


def test_an_mps_allocation_goes_over_the_wire_and_back() -> None:
    back = Job.from_wire(_mps_job().to_wire())
    a = back.allocation[0]
    assert (a.shards, a.share_kind, a.mps_gpus, a.mps_count) == ({1: 50}, "mps", [1], 50)
    assert a.gpu_share == 0.5
    plain = Job.from_wire(Job(id=8, allocation=[NodeAllocation("n1", 1, 0, [0])]).to_wire())
    assert plain.allocation[0].share_kind == "shard" and plain.allocation[0].mps_gpus == []


def test_the_ledger_keeps_a_runs_mps(empty_ledger: str) -> None:
    from schedd.ledger.migrate import upgrade
    from schedd.ledger.store import Store

    upgrade(empty_ledger)
    store = Store(empty_ledger)
    try:
        store.insert_jobs([_mps_job()])
        [back] = store.load_jobs(active_only=False)
        assert back.mps_per_node == 50
        a = back.allocation[0]
        assert (a.shards, a.shards_per_gpu, a.share_kind) == ({1: 50}, 100, "mps")
    finally:
        store.close()


def test_the_commands_show_a_nodes_mps() -> None:
    node = {"gpus": [{"model": "A100"}], "mps_per_gpu": 100, "alloc_mps": 50,
            "shards_per_gpu": 0}
    assert node_gres(node) == "gpu:a100:1,mps:100"
    assert node_gres_used(node) == "gpu:a100:0,mps:50"
    assert job_tres_per_node({"mps_per_node": 50}) == "gres:mps:50"
