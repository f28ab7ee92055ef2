"""The idle-GPU watch's memory (``Watch``: per run, per node; lifecycle/idlegpu.py says what
it watches), held by the agents' registry. Apart from the watch's acting, which needs the
transitions, so that the services object can name the registry without a circle."""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.model import Job

Run = tuple[int, int]  # (job id, generation)


@dataclass(slots=True)
class Watch:
    """The watch's memory (see the module): per run, per node."""

    heard: dict[tuple[int, int, str], float] = field(default_factory=dict)  # last reading
    idle_nodes: dict[Run, dict[str, bool]] = field(default_factory=dict)
    unsaved: dict[Run, float] = field(default_factory=dict)  # GPU-seconds not in the ledger
    saved_at: dict[Run, float] = field(default_factory=dict)
    flagged: set[Run] = field(default_factory=set)

    def total(self, job: Job) -> float:
        """The run's idle GPU-seconds so far: the ledger's and those not written yet."""
        return (job.idle_gpu_s or 0.0) + self.unsaved.get((job.id, job.generation), 0.0)

    def forget(self, run: Run) -> None:
        self.idle_nodes.pop(run, None)
        self.unsaved.pop(run, None)
        self.saved_at.pop(run, None)
        self.flagged.discard(run)
        for key in [k for k in self.heard if k[:2] == run]:
            del self.heard[key]
