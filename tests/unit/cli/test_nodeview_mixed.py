"""sinfo/scontrol's GRES of a node of several GPU types (a MIG GPU of mixed profiles)."""

from __future__ import annotations

from cli.nodeview import node_gres, node_gres_drain, node_gres_used

MODEL = "NVIDIA A100-SXM4-80GB MIG "


def _node(**extra) -> dict:
    gpus = [{"index": i, "model": MODEL + p, "cpus": [], "fault": ""}
            for i, p in enumerate(["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])]
    return {"cpus": 8, "gpus": gpus, **extra}


def test_each_type_with_its_count_in_name_order() -> None:
    node = _node(alloc_gpus=2, alloc_gpu_ids=[0, 3])
    assert node_gres(node) == "gpu:1g.10gb:2,gpu:2g.20gb:1,gpu:3g.40gb:1"
    assert node_gres_used(node) == "gpu:1g.10gb:1,gpu:2g.20gb:0,gpu:3g.40gb:1"
    node["gpus"][2]["fault"] = node["gpus"][0]["fault"] = "xid 79"
    assert node_gres_drain(node) == "gpu:1g.10gb:1(IDX:2),gpu:3g.40gb:1(IDX:0)"
