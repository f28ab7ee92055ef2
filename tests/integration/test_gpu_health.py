"""A GPU that fails takes no job down with it (issue 30, items 3-5): a fatal NVML fault,
injected with ``kiln fake-gpu`` into the agent's fake NVML (the same watch real NVML feeds),
drains that GPU only. The job on it gets its --signal, then ends NODE_FAIL and is requeued onto
the node's remaining GPUs; the node still runs a 3-GPU job, a 4-GPU one pends; sinfo -R,
scontrol show node, kiln top, kiln events, sacct -D and kiln why say so; RESUME brings the GPU
back. An application Xid (13) drains nothing."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, cleanup, until, world_tempdir
from tests.integration.conftest import BACKENDS, _cluster

SCRIPT = """#!/bin/bash
trap 'echo "$SLURM_JOB_ID" >> {wd}/signalled' USR1
echo run >> {wd}/runs
while true; do sleep 0.1; done
"""


@pytest.fixture(scope="module", params=BACKENDS)
def node(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One node of 4 fake A100s; a job on a failed GPU has 2 s after its notice, then
    SIGTERM and SIGKILL 2 s later."""
    yield from _cluster(request, request.param, nodes=1, fake_gpus="4xA100", kill_wait=2,
                        schedd_extra="gpu_fault_grace = 2.0")


@pytest.fixture
def wd() -> Iterator[Path]:
    path = world_tempdir("kiln-gpuh-")
    path.chmod(0o777)
    yield path
    subprocess.run(["pkill", "-f", str(path)], capture_output=True)
    cleanup(path)


def _gpus(cluster: Cluster, job_id: int) -> list[int]:
    return [g for a in cluster.job(job_id)["allocation"] for g in a["gpus"]]


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.mark.parametrize("fault", [("--xid", "79"), ("--ecc",), ("--lost",)],
                         ids=["xid79", "ecc", "lost"])
def test_fatal_fault_drains_that_gpu_only(node: Cluster, wd: Path, fault: tuple[str, ...]
                                          ) -> None:
    job = node.sbatch("--gres=gpu:2", "--signal=B:USR1@30", "-o", f"{wd}/out-%j",
                      input=SCRIPT.format(wd=wd), cwd=wd)
    node.wait(job, {"RUNNING"})
    until(lambda: _lines(wd / "runs"), "the job's first run started")
    bad = _gpus(node, job)[0]
    began = time.monotonic()
    out = node.ok("kiln", "fake-gpu", "node1", str(bad), *fault)
    assert "injected" in out
    until(lambda: str(job) in _lines(wd / "signalled"), "the job got its --signal")
    until(lambda: node.job(job)["restart_count"] == 1 and node.job(job)["state"] == "RUNNING"
          and len(_lines(wd / "runs")) == 2, "the job was requeued and restarted", timeout=30)
    assert time.monotonic() - began < 30
    assert bad not in _gpus(node, job)  # restarted on the node's remaining GPUs

    # what an admin sees
    reasons = node.ok("sinfo", "-R")
    assert reasons.split("\n")[0].split() == ["REASON", "USER", "TIMESTAMP", "NODELIST"]
    assert re.search(rf"^GPU {bad}: .*node1$", reasons, re.M), reasons
    shown = node.ok("scontrol", "show", "node", "node1")
    assert f"GresDrain=gpu:a100:1(IDX:{bad})" in shown
    assert re.search(rf"^\s*Reason=GPU {bad}: ", shown, re.M), shown
    assert "State=DRAIN" not in shown  # the node is not drained, one GPU is
    assert "!gpu" in node.ok("kiln", "top", "--once")
    events = node.ok("kiln", "events", "node1")
    assert re.search(rf"gpu_fault\s+gpu={bad} ", events), events
    why = node.ok("kiln", "why", str(job))
    assert re.search(rf"Requeued once, last at .*: GPU {bad} of node1 failed", why), why
    acct = node.ok("sacct", "-D", "-X", "-n", "-P", "-j", str(job), "-o", "State,Reason")
    assert re.search(rf"^NODE_FAIL\|GPU {bad} of node1 failed", acct, re.M), acct

    # the other three GPUs keep being scheduled; a 4-GPU job cannot start
    node.run("scancel", str(job))
    node.wait(job, {"CANCELLED"})
    three = node.sbatch("--gres=gpu:3", "--wrap", "sleep 600", cwd=wd)
    node.wait(three, {"RUNNING"})
    assert bad not in _gpus(node, three)
    node.run("scancel", str(three))
    node.wait(three, {"CANCELLED"})
    four = node.sbatch("--gres=gpu:4", "--wrap", "sleep 600", cwd=wd)
    until(lambda: node.job(four)["reason"] not in ("", "None"), "the 4-GPU job has a reason")
    time.sleep(2)  # several scheduling cycles on an otherwise empty node
    pending = node.job(four)
    assert pending["state"] == "PENDING", pending
    assert pending["reason"] == "ReqNodeNotAvail", pending["reason"]

    # back in service only by RESUME (after the admin has looked: here, cleared the fake)
    node.ok("kiln", "fake-gpu", "node1", str(bad), "--clear")
    node.ok("scontrol", "update", "NodeName=node1", "State=RESUME")
    node.wait(four, {"RUNNING"}, timeout=20)
    assert len(_gpus(node, four)) == 4
    assert "GresDrain" not in node.ok("scontrol", "show", "node", "node1")
    node.run("scancel", str(four))
    node.wait(four, {"CANCELLED"})


def test_application_xid_drains_nothing(node: Cluster, wd: Path) -> None:
    job = node.sbatch("--gres=gpu:2", "--wrap", "sleep 600", cwd=wd)
    node.wait(job, {"RUNNING"})
    gpu = _gpus(node, job)[0]
    node.ok("kiln", "fake-gpu", "node1", str(gpu), "--xid", "13")
    until(lambda: re.search(rf"gpu_event\s+gpu={gpu} .*Xid 13",
                            node.ok("kiln", "events", "node1")), "the Xid was audited")
    time.sleep(3)  # past the grace a fatal fault would have had
    after = node.job(job)
    assert after["state"] == "RUNNING" and after["restart_count"] == 0
    assert "GresDrain" not in node.ok("scontrol", "show", "node", "node1")
    assert "node1" not in node.ok("sinfo", "-R", "-h")
    node.run("scancel", str(job))
    node.wait(job, {"CANCELLED"})


def test_fake_gpu_refusals(node: Cluster, other_user: str) -> None:
    res = node.run("kiln", "fake-gpu", "node1", "0", "--lost", user=other_user)
    assert res.returncode != 0 and "Access/permission denied" in res.stderr
    res = node.run("kiln", "fake-gpu", "node1", "9", "--lost")
    assert res.returncode != 0 and "has no GPU 9" in res.stderr
    res = node.run("kiln", "fake-gpu", "node7", "0", "--lost")
    assert res.returncode != 0 and "Invalid node name specified: node7" in res.stderr
    res = node.run("kiln", "fake-gpu", "node1", "0", "--lost", "--ecc")
    assert res.returncode != 0 and "exactly one of" in res.stderr
    assert "Traceback" not in res.stderr
