"""The GPU health watch (agentd/gpuhealth.py) over a fake pynvml, the Xid table
(kiln/slurm/gpufaults.py), and the fake sampler's --util override."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agentd.gpuhealth import FakeNvml, Watcher
from agentd.gpus import discover, fake_gpus
from agentd.gpus import parents as gpu_parents
from agentd.sampler import FakeGPUs, fake_gpu_sample
from kiln.slurm.gpufaults import APPLICATION_XIDS, FATAL_XIDS, describe, is_fatal


@pytest.mark.parametrize("xid", [48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120])
def test_gpu_gone_or_reset_xids_are_fatal(xid: int) -> None:
    assert is_fatal("xid", xid)
    assert describe("xid", xid).startswith(f"Xid {xid} (")


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 999])
def test_application_and_unknown_xids_are_not(xid: int) -> None:
    assert not is_fatal("xid", xid)


def test_tables_do_not_overlap_and_other_kinds_are_fatal() -> None:
    assert not set(FATAL_XIDS) & set(APPLICATION_XIDS)
    for kind in ("ecc", "retired", "remap", "lost"):
        assert is_fatal(kind)
    assert describe("lost") == "GPU is lost (NVML_ERROR_GPU_IS_LOST)"


def _watch(count: int = 4) -> tuple[FakeNvml, Watcher]:
    nvml = FakeNvml(count)
    return nvml, Watcher(nvml, count, counters_every=0.0)


def test_nothing_happens_nothing_is_reported() -> None:
    _, watch = _watch()
    assert watch.poll(1.0) == [] and watch.poll(2.0) == []


def test_xid_events_are_reported_once_each() -> None:
    nvml, watch = _watch()
    nvml.inject(1, "xid", 79)
    nvml.inject(2, "xid", 13)
    faults = watch.poll(1.0)
    assert [(f.index, f.kind, f.xid) for f in faults] == [(1, "xid", 79), (2, "xid", 13)]
    assert watch.poll(2.0) == []


def test_ecc_event_and_counter_give_one_fault() -> None:
    nvml, watch = _watch()
    nvml.inject(0, "ecc")
    faults = watch.poll(1.0)
    assert [(f.index, f.kind) for f in faults] == [(0, "ecc")]
    assert watch.poll(2.0) == []  # the counter's rise was the event's


def test_ecc_counter_rise_without_event_is_a_fault() -> None:
    nvml, watch = _watch()
    nvml.devices[3].ecc = 2  # a driver that sent no event
    assert [(f.index, f.kind) for f in watch.poll(1.0)] == [(3, "ecc")]


def test_lost_gpu_reported_once_while_lost_and_again_after_reset() -> None:
    nvml, watch = _watch()
    nvml.inject(2, "lost")
    assert [(f.index, f.kind) for f in watch.poll(1.0)] == [(2, "lost")]
    assert watch.poll(2.0) == []
    watch.reset([2])  # resumed while still lost: reported again
    assert [(f.index, f.kind) for f in watch.poll(3.0)] == [(2, "lost")]
    nvml.inject(2, "clear")
    watch.reset([2])
    assert watch.poll(4.0) == []


def test_retired_pages_and_remap_failure() -> None:
    nvml, watch = _watch()
    nvml.inject(0, "retired")
    nvml.inject(1, "remap")
    assert sorted((f.index, f.kind) for f in watch.poll(1.0)) == [(0, "retired"), (1, "remap")]
    assert watch.poll(2.0) == []


def test_counters_wait_for_their_interval() -> None:
    nvml = FakeNvml(1)
    watch = Watcher(nvml, 1, counters_every=10.0)
    assert watch.poll(100.0) == []
    nvml.inject(0, "lost")
    assert watch.poll(105.0) == []
    assert [f.kind for f in watch.poll(110.0)] == ["lost"]


class _Pynvml:
    """A pynvml-shaped fake of the real module: ctypes-like handles, events by device."""

    class NVMLError(Exception):
        def __init__(self, value: int):
            self.value = value

    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_TIMEOUT, NVML_ERROR_GPU_IS_LOST = 3, 10, 15
    NVML_FEATURE_ENABLED = 1
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 1, 0
    nvmlEventTypeDoubleBitEccError, nvmlEventTypeXidCriticalError = 0x2, 0x8

    def __init__(self) -> None:
        self.handles = [object(), object()]
        self.queue: list = []
        self.registered: list = []

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return self.handles[i]

    def nvmlEventSetCreate(self):  # noqa: N802
        return "set"

    def nvmlDeviceRegisterEvents(self, h, mask, s):  # noqa: N802
        self.registered.append((self.handles.index(h), mask))

    def nvmlEventSetWait(self, s, timeout):  # noqa: N802
        if not self.queue:
            raise self.NVMLError(self.NVML_ERROR_TIMEOUT)
        return self.queue.pop(0)

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):  # noqa: N802
        raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):  # noqa: N802
        raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetRemappedRows(self, h):  # noqa: N802
        if h is self.handles[1]:
            raise self.NVMLError(self.NVML_ERROR_GPU_IS_LOST)
        return (0, 0, 0, 0)


def test_real_shaped_pynvml() -> None:
    nvml = _Pynvml()
    watch = Watcher(nvml, 2, counters_every=0.0)
    assert [i for i, _ in nvml.registered] == [0, 1]
    assert all(mask == 0xA for _, mask in nvml.registered)
    nvml.queue.append(SimpleNamespace(device=nvml.handles[0], eventType=0x8, eventData=48))
    faults = watch.poll(1.0)
    assert sorted((f.index, f.kind, f.xid) for f in faults) == [(0, "xid", 48), (1, "lost", 0)]


def test_fake_sampler_util_override() -> None:
    gpus = fake_gpus("2xA100", seed="n")
    nvml = FakeNvml(2)
    backend = FakeGPUs(gpus, nvml)
    assert backend.sample(7, [0, 1], set()) == [fake_gpu_sample(7, 0, gpus[0].memory_mb),
                                                fake_gpu_sample(7, 1, gpus[1].memory_mb)]
    nvml.inject(1, "util", 3)
    assert backend.sample(7, [1], set())[0][0] == 3.0
    nvml.inject(1, "clear")
    assert backend.sample(7, [1], set()) == [fake_gpu_sample(7, 1, gpus[1].memory_mb)]


def test_a_mig_gpus_fault_is_a_fault_of_each_of_its_instances() -> None:
    """Two GPUs in MIG mode, three instances on GPU 0 and two on GPU 1 (agentd.gpus.parents):
    the watch reads the GPUs, and reports by instance, as schedd hands them out."""
    gpus = discover("2xA100", seed="n", fake_mig="2g.20gb:3")
    parents = gpu_parents(gpus)
    assert parents == [0, 0, 0, 1, 1, 1]
    nvml = FakeNvml(2, parents)
    watch = Watcher(nvml, 2, counters_every=0.0, parents=parents)
    nvml.inject(parents[4], "xid", 79)  # kiln fake-gpu NODE 4: instance 4's GPU, GPU 1
    assert [(f.index, f.kind, f.xid) for f in watch.poll(1.0)] == [
        (3, "xid", 79), (4, "xid", 79), (5, "xid", 79)]
    nvml.inject(0, "lost")
    assert [(f.index, f.kind) for f in watch.poll(2.0)] == [(0, "lost"), (1, "lost"),
                                                            (2, "lost")]
    assert watch.poll(3.0) == []  # lasting: once
    watch.reset([1])  # schedd resumed instance 1: its GPU is read afresh, still lost
    assert [(f.index, f.kind) for f in watch.poll(4.0)] == [(0, "lost"), (1, "lost"),
                                                            (2, "lost")]
    # the fake sampler's --util of an instance is its GPU's
    nvml.inject(1, "util", 42)
    backend = FakeGPUs(gpus, nvml)
    assert [u for u, _ in backend.sample(7, [3, 5], set())] == [42.0, 42.0]
    assert nvml.util(0) is None and nvml.util(2) is None  # GPU 0's instances: not forced
