"""GPU faults: what the agents watch on NVML and which of them take a GPU out of service.

An agent (agentd/gpuhealth.py) reports every fault it sees as ``(kind, xid)``; schedd decides
with ``is_fatal`` whether the GPU is drained (schedd/lifecycle/gpuhealth.py). The kinds:

- ``xid``: an Xid event (``nvmlEventTypeXidCriticalError``); fatal or the application's own by
  the tables below (NVIDIA's "XID Errors" guide);
- ``ecc``: a volatile double-bit (uncorrectable) ECC error: memory is corrupt, the GPU needs a
  reset;
- ``retired``: pages waiting to be retired (``nvmlDeviceGetRetiredPagesPendingStatus``): the
  retirement takes effect only after a GPU reset;
- ``remap``: a row-remap failure (``nvmlDeviceGetRemappedRows``'s failure flag, A100 and
  later): the memory cannot be repaired, the GPU must be reset or replaced;
- ``lost``: ``NVML_ERROR_GPU_IS_LOST`` from any call: the GPU is gone from the bus.

Standard library only (imported by agentd and schedd alike).
"""

from __future__ import annotations

KINDS = ("xid", "ecc", "retired", "remap", "lost")
# what ``kiln fake-gpu`` may inject into a fake GPU (agentd/gpuhealth.py FakeNvml.inject)
FAKE_ACTIONS = ("xid", "ecc", "lost", "retired", "remap", "util", "clear")

# Xids after which the GPU is gone or must be reset before another job may use it
FATAL_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    122: "SPI PMU RPC read failure",
    123: "SPI PMU RPC write failure",
    140: "unrecovered ECC error",
}

# Xids the application causes (a bad kernel, a fault in its own memory): its own failure, the
# GPU stays in service
APPLICATION_XIDS: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
    68: "video processor exception",
    69: "graphics engine class error",
}

KIND_TEXT = {
    "ecc": "volatile double-bit ECC error",
    "retired": "retired pages pending (needs a GPU reset)",
    "remap": "row-remap failure",
    "lost": "GPU is lost (NVML_ERROR_GPU_IS_LOST)",
}


def is_fatal(kind: str, xid: int = 0) -> bool:
    """Whether the fault takes the GPU out of service. An Xid in neither table is treated as
    the application's: draining a GPU for an Xid nobody classified would punish every job."""
    if kind == "xid":
        return xid in FATAL_XIDS
    return kind in KIND_TEXT


def describe(kind: str, xid: int = 0) -> str:
    """One line: ``Xid 79 (GPU has fallen off the bus)``, ``volatile double-bit ECC error``."""
    if kind == "xid":
        text = FATAL_XIDS.get(xid) or APPLICATION_XIDS.get(xid) or "unclassified"
        return f"Xid {xid} ({text})"
    return KIND_TEXT.get(kind, kind)
