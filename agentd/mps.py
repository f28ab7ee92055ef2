"""CUDA MPS for gres/mps jobs: one control daemon per GPU while MPS jobs run on it.

A job that holds ``--gres=mps:N`` units of a GPU (schedd says which GPUs: the launch's
``mps_gpus``) runs as an MPS client of that GPU's control daemon. The first such job on a GPU
starts ``nvidia-cuda-mps-control -d`` with ``CUDA_VISIBLE_DEVICES`` naming that GPU and the
GPU's own pipe and log directories (under the agent's spool: ``mps/gpu<i>/pipe`` and
``.../log``, world-readable so the job's user reaches them); the last one to end stops it
(``echo quit | nvidia-cuda-mps-control``, with the same environment). The job gets
``CUDA_MPS_PIPE_DIRECTORY`` and ``CUDA_MPS_LOG_DIRECTORY`` from here;
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` comes from schedd (schedd/domain/jobenv.py).

The daemon runs only for real GPUs and when the program is there (on PATH, or ``[agent]
mps_control``). Fake GPUs have no MPS: their jobs get the environment only, and the agent
says so once in its log. ``[agent] mps_control`` names the program and is run with fake GPUs
too: for tests only (a stand-in that records how it was called), never on a real node.

Holders are keys: ``("job", id, generation)`` for a batch job, ``("step", id, step id)`` for
an srun step (salloc's allocations have no batch script here). A daemon that fails to start is
logged, and its jobs run on (CUDA falls back to no MPS).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path

log = logging.getLogger(__name__)

PROGRAM = "nvidia-cuda-mps-control"
TIMEOUT = 10.0  # seconds a start (-d daemonises at once) or a quit may take


def find_program(setting: str, fake_gpus: bool) -> str | None:
    """The control program to run, or None for none: ``setting`` (a path, tests) whatever the
    GPUs; else nvidia-cuda-mps-control from PATH, for real GPUs only."""
    if setting:
        return setting
    if fake_gpus:
        return None
    return shutil.which(PROGRAM)


Runner = Callable[[list[str], dict[str, str], bytes | None], None]


def _run(argv: list[str], env: dict[str, str], stdin: bytes | None) -> None:
    done = subprocess.run(argv, env=env, input=stdin, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, timeout=TIMEOUT, check=False)
    if done.returncode:
        raise OSError(f"exit {done.returncode}: "
                      f"{done.stderr.decode(errors='replace').strip()[:200]}")


class Mps:
    def __init__(self, root: Path, program: str | None, fake_gpus: bool,
                 runner: Runner = _run) -> None:
        self.root = root
        self.program = program
        self.fake_gpus = fake_gpus
        self._runner = runner
        self.holders: dict[int, set[Hashable]] = {}  # GPU index -> who holds MPS units on it
        self._said_none = False

    def dirs(self, gpu: int) -> tuple[Path, Path]:
        """The GPU's pipe and log directories."""
        base = self.root / f"gpu{gpu}"
        return base / "pipe", base / "log"

    def environment(self, gpus: Iterable[int]) -> dict[str, str]:
        """What an MPS client of these GPUs (one, in Slurm 22.05) needs to find its daemon."""
        gpus = sorted(gpus)
        if not gpus:
            return {}
        pipe, logs = self.dirs(gpus[0])
        return {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}

    def _daemon_env(self, gpu: int) -> dict[str, str]:
        return {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu), **self.environment([gpu])}

    def _make_dirs(self, gpu: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        for path in self.dirs(gpu):
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path.parent, 0o755)
            os.chmod(path, 0o755)  # the job's user reaches the daemon's pipes and logs

    def acquire(self, key: Hashable, gpus: Iterable[int]) -> dict[str, str]:
        """``key`` starts using MPS on ``gpus``: the daemon of each GPU it is the first on
        starts. Returns the environment the job gets."""
        gpus = sorted(set(gpus))
        for gpu in gpus:
            holders = self.holders.setdefault(gpu, set())
            first = not holders
            holders.add(key)
            if not first:
                continue
            try:
                self._make_dirs(gpu)
            except OSError as exc:
                log.warning("MPS directories of GPU %d: %s", gpu, exc)
            if self.program is None:
                if not self._said_none:
                    self._said_none = True
                    log.info("gres/mps: no MPS control daemon runs for %s; MPS jobs get "
                             "CUDA_MPS_* only", "fake GPUs" if self.fake_gpus
                             else f"{PROGRAM} is not on PATH")
                continue
            self._call(gpu, [self.program, "-d"], None, "start")
        return self.environment(gpus)

    def holds(self, key: Hashable) -> bool:
        return any(key in holders for holders in self.holders.values())

    def adopt(self, key: Hashable, gpus: Iterable[int]) -> None:
        """A job re-attached after an agent restart: its daemons already run."""
        for gpu in gpus:
            self.holders.setdefault(gpu, set()).add(key)

    def release(self, key: Hashable) -> None:
        """``key`` is over: the daemon of each GPU it was the last on stops."""
        for gpu, holders in list(self.holders.items()):
            if key not in holders:
                continue
            holders.discard(key)
            if holders:
                continue
            del self.holders[gpu]
            if self.program is not None:
                self._call(gpu, [self.program], b"quit\n", "stop")

    def _call(self, gpu: int, argv: list[str], stdin: bytes | None, what: str) -> None:
        try:
            self._runner(argv, self._daemon_env(gpu), stdin)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("MPS control daemon of GPU %d: %s failed: %s", gpu, what, exc)
            return
        log.info("MPS control daemon of GPU %d: %s", gpu, "started" if what == "start"
                 else "stopped")
