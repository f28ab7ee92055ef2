"""The agent's GPU health watch: one stream of faults, read from NVML or from a fake NVML.

``Watcher.poll`` is called every loop turn and never blocks. It reads:

- NVML events (``nvmlEventSetCreate``, ``nvmlDeviceRegisterEvents`` for Xid critical errors
  and double-bit ECC errors, ``nvmlEventSetWait`` with a zero timeout): each Xid and each
  double-bit ECC error is a fault;
- counters, every ``counters_every`` seconds: the volatile uncorrected ECC count (a rise is a
  fault), pending retired pages and row-remap failures (a fault once, while they last);
- ``NVML_ERROR_GPU_IS_LOST`` from any of those calls: the GPU is lost (once, while it lasts).

Which faults take the GPU out of service is schedd's decision (``kiln.slurm.gpufaults``); the
watch reports every one, the application's Xids too (they go to the node's audit history).

``FakeNvml`` is a small stand-in for the parts of pynvml the watch uses, with the same names,
constants and errors, plus what ``kiln fake-gpu`` injects (``inject``): an Xid event, a
double-bit ECC error, a lost GPU, a utilisation the fake sampler reports (agentd/sampler.py
``FakeGPUs``), or all of that cleared. Fake GPUs thus go through the very code real ones do.
``reset`` forgets what was reported of a GPU (schedd resumed it): a GPU still broken is
reported again.

MIG: the watch reads the physical GPUs; ``parents`` (``agentd.gpus.parents``: for each GPU the
node hands out, its physical GPU) turns a fault of a MIG-mode GPU into one fault for each of
its instances, as the instances are what schedd knows and hands out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

log = logging.getLogger("agentd.gpuhealth")

MAX_EVENTS_PER_POLL = 64


class Fault(NamedTuple):
    index: int
    kind: str  # kiln.slurm.gpufaults.KINDS
    xid: int = 0
    detail: str = ""

    def wire(self) -> dict[str, Any]:
        """The heartbeat's ``gpu_faults`` item (kiln.wire.operations)."""
        return {"index": self.index, "kind": self.kind, "xid": self.xid,
                "detail": self.detail[:256]}


class Watcher:
    """NVML's error signals of ``count`` GPUs (``nvml``: pynvml, or a ``FakeNvml``)."""

    def __init__(self, nvml: Any, count: int, counters_every: float = 10.0,
                 parents: Sequence[int] = ()):
        self.nvml = nvml
        self.count = count
        # reported GPU index -> its physical GPU (MIG instances); empty: the same index
        self.parents = list(parents)
        self.counters_every = counters_every
        self._last_counters = float("-inf")
        self.handles: dict[int, Any] = {}
        self._ecc: dict[int, int] = {}  # volatile uncorrected ECC count last read
        self._flagged: set[tuple[int, str]] = set()  # (index, kind) of lasting faults reported
        self._out: list[Fault] = []
        self.events = None
        for index in range(count):
            handle = self._call(index, nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is not None:
                self.handles[index] = handle
        try:
            self.events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.warning("NVML events unavailable (%s): counters only", exc)
        mask = nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
        for index, handle in self.handles.items():
            if self.events is not None:
                self._call(index, nvml.nvmlDeviceRegisterEvents, handle, mask, self.events)
            self._ecc[index] = self._ecc_count(index) or 0
        self._out.clear()  # what registration saw is read again by the first poll

    # --- reading ------------------------------------------------------------------------------

    def poll(self, now: float) -> list[Fault]:
        """The faults seen since the last call (events now; counters when they are due)."""
        self._read_events()
        if now - self._last_counters >= self.counters_every:
            self._last_counters = now
            for index in self.handles:
                self._read_counters(index)
        out, self._out = self._out, []
        return self._as_reported(out)

    def _as_reported(self, faults: list[Fault]) -> list[Fault]:
        """Faults of physical GPUs as faults of the GPUs schedd knows: each MIG instance of a
        failing GPU fails with it."""
        if not self.parents:
            return faults
        return [f._replace(index=i) for f in faults
                for i, p in enumerate(self.parents) if p == f.index]

    def reset(self, indices: Iterable[int]) -> None:
        """schedd resumed these GPUs: forget what was reported, read the counters afresh."""
        indices = set(indices)
        if self.parents:  # MIG instances: their physical GPUs
            indices = {self.parents[i] for i in indices if 0 <= i < len(self.parents)}
        for index in indices:
            if index in self.handles:
                self._ecc[index] = self._ecc_count(index) or 0
        self._flagged = {f for f in self._flagged if f[0] not in indices}
        self._out = [f for f in self._out if f.index not in indices]
        self._last_counters = float("-inf")

    def _read_events(self) -> None:
        nvml = self.nvml
        if self.events is None:
            return
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                event = nvml.nvmlEventSetWait(self.events, 0)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != nvml.NVML_ERROR_TIMEOUT:
                    log.debug("nvmlEventSetWait: %s", exc)
                return
            index = self._index_of(event.device)
            if index is None:
                continue
            if event.eventType & nvml.nvmlEventTypeXidCriticalError:
                xid = int(event.eventData)
                self._out.append(Fault(index, "xid", xid, f"Xid {xid}"))
            elif event.eventType & nvml.nvmlEventTypeDoubleBitEccError:
                self._ecc[index] = max(self._ecc.get(index, 0), self._ecc_count(index) or 0)
                self._out.append(Fault(index, "ecc", 0, "double-bit ECC error event"))

    def _index_of(self, device: Any) -> int | None:
        for index, handle in self.handles.items():
            if handle is device or handle == device:
                return index
        try:
            return int(self.nvml.nvmlDeviceGetIndex(device))
        except (self.nvml.NVMLError, TypeError, ValueError):
            return None

    def _read_counters(self, index: int) -> None:
        nvml, handle = self.nvml, self.handles[index]
        count = self._ecc_count(index)
        if count is not None:
            if count > self._ecc.get(index, 0):
                self._out.append(Fault(index, "ecc", 0,
                                       f"volatile uncorrected ECC count {count}"))
            self._ecc[index] = count
        pending = self._call(index, nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        self._lasting(index, "retired", pending is not None and
                      int(pending) == nvml.NVML_FEATURE_ENABLED, "retired pages pending")
        rows = self._call(index, nvml.nvmlDeviceGetRemappedRows, handle)
        self._lasting(index, "remap", rows is not None and bool(rows[3]),
                      "row-remap failure")

    def _ecc_count(self, index: int) -> int | None:
        nvml = self.nvml
        value = self._call(index, nvml.nvmlDeviceGetTotalEccErrors, self.handles[index],
                           nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)
        return None if value is None else int(value)

    def _lasting(self, index: int, kind: str, present: bool, detail: str) -> None:
        """A fault that lasts (lost, pages pending, remap failure): reported once."""
        if present and (index, kind) not in self._flagged:
            self._flagged.add((index, kind))
            self._out.append(Fault(index, kind, 0, detail))

    def _call(self, index: int, fn: Any, *args: Any) -> Any:
        """An NVML call about one GPU; None when it failed (a lost GPU is reported)."""
        nvml = self.nvml
        try:
            return fn(*args)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == nvml.NVML_ERROR_GPU_IS_LOST:
                self._lasting(index, "lost", True, "NVML_ERROR_GPU_IS_LOST")
            elif getattr(exc, "value", None) != nvml.NVML_ERROR_NOT_SUPPORTED:
                log.debug("NVML %s on GPU %d: %s", getattr(fn, "__name__", fn), index, exc)
            return None


def nvml_watcher(count: int, parents: Sequence[int] = ()) -> Watcher | None:
    """The watch of this node's ``count`` real GPUs (``parents``: see ``Watcher``), or None
    when NVML will not start."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return Watcher(pynvml, count, parents=parents)
    except Exception as exc:  # noqa: BLE001 - no watch is better than no agent
        log.warning("GPU health watch off: NVML did not start: %s", exc)
        return None


# --- the fake NVML --------------------------------------------------------------------------


class FakeNVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeEvent(NamedTuple):
    device: Any
    eventType: int  # noqa: N815 - pynvml's c_nvmlEventData_t names
    eventData: int  # noqa: N815


@dataclass(slots=True)
class FakeDevice:
    xids: list[int] = field(default_factory=list)  # queued events: Xid, or 0 for an ECC error
    ecc: int = 0
    retired_pending: bool = False
    remap_failure: bool = False
    lost: bool = False
    util: float | None = None  # --util: what the fake sampler reports


class FakeNvml:
    """The part of pynvml the watch reads, for ``--fake-gpus``; handles are the indices."""

    NVMLError = FakeNVMLError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_FEATURE_ENABLED = 1
    NVML_FEATURE_DISABLED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    nvmlEventTypeDoubleBitEccError = 0x2
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, count: int, parents: Sequence[int] = ()):
        self.devices = [FakeDevice() for _ in range(count)]
        # the GPU index the sampler asks ``util`` of -> its device here (MIG: the parent)
        self.parents = list(parents)

    # what kiln fake-gpu does
    def inject(self, index: int, action: str, value: int = 0) -> None:
        dev = self.devices[index]
        if action == "xid":
            dev.xids.append(value)
        elif action == "ecc":
            dev.ecc += 1
            dev.xids.append(0)
        elif action == "lost":
            dev.lost = True
        elif action == "retired":
            dev.retired_pending = True
        elif action == "remap":
            dev.remap_failure = True
        elif action == "util":
            dev.util = float(value)
        elif action == "clear":
            self.devices[index] = FakeDevice()
        else:
            raise ValueError(f"unknown fake GPU action {action!r}")

    def util(self, index: int) -> float | None:
        if self.parents:
            index = self.parents[index] if 0 <= index < len(self.parents) else -1
        return self.devices[index].util if 0 <= index < len(self.devices) else None

    # pynvml's names
    def _dev(self, handle: int) -> FakeDevice:
        if not 0 <= handle < len(self.devices):
            raise FakeNVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
        dev = self.devices[handle]
        if dev.lost:
            raise FakeNVMLError(self.NVML_ERROR_GPU_IS_LOST)
        return dev

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        self._dev(index)
        return index

    def nvmlDeviceGetIndex(self, handle: int) -> int:  # noqa: N802
        return handle

    def nvmlEventSetCreate(self) -> object:  # noqa: N802
        return object()

    def nvmlDeviceRegisterEvents(self, handle: int, mask: int, events: object) -> None:  # noqa: N802
        self._dev(handle)

    def nvmlEventSetWait(self, events: object, timeout_ms: int) -> FakeEvent:  # noqa: N802
        for index, dev in enumerate(self.devices):
            if dev.xids:
                xid = dev.xids.pop(0)
                kind = (self.nvmlEventTypeXidCriticalError if xid else
                        self.nvmlEventTypeDoubleBitEccError)
                return FakeEvent(index, kind, xid)
        raise FakeNVMLError(self.NVML_ERROR_TIMEOUT)

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:  # noqa: N802
        return self._dev(handle).ecc

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:  # noqa: N802
        return int(self._dev(handle).retired_pending)

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:  # noqa: N802
        dev = self._dev(handle)
        return (0, int(dev.remap_failure), 0, int(dev.remap_failure))
