"""The Alibaba GPU cluster trace (cluster-trace-gpu-v2023, "openb") as tasks and nodes.

Two CSV files: the pod list (``cpu_milli``, ``memory_mib``, ``num_gpu``, ``gpu_milli``,
``gpu_spec``, ...) and the node list (``cpu_milli``, ``memory_mib``, ``gpu``, ``model``). Only
those columns are read; the others (times, QoS, phase) play no part in the protocol of Weng et al.
A pod asks for ``num_gpu`` whole GPUs, or, when ``num_gpu`` is 1 and ``gpu_milli`` < 1000, that
fraction of one GPU; ``gpu_spec`` (``V100M16|V100M32``) restricts the models, empty = any.

Gzipped files are recognised by their magic bytes, whatever their name. Every problem is one
``OpenbError`` naming the file and line.
"""

from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

from schedd.scheduler.gpushare import WHOLE, NodeKind, Task

GZIP_MAGIC = b"\x1f\x8b"
POD_COLUMNS = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
NODE_COLUMNS = ("cpu_milli", "memory_mib", "gpu", "model")
MAX_GPUS = 64  # per task or node: far above any real box, keeps a typo from looking plausible


class OpenbError(Exception):
    """A trace file that cannot be read; the message names the file and, where it can, the line."""


def _rows(path: str | Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    name = Path(path).name
    try:
        raw = Path(path).read_bytes()
        if raw[:2] == GZIP_MAGIC:
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise OpenbError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise OpenbError(f"{path}: is a directory") from None
    except OSError as exc:
        raise OpenbError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, EOFError) as exc:
        raise OpenbError(f"{name}: not a CSV text file ({exc.__class__.__name__})") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise OpenbError(f"{name}: no column {', '.join(missing)} in the header line")
    rows = []
    try:
        for row in reader:
            rows.append((reader.line_num, row))
    except csv.Error as exc:
        raise OpenbError(f"{name} line {reader.line_num}: {exc}") from None
    if not rows:
        raise OpenbError(f"{name}: no rows after the header")
    return rows


def _int(name: str, line: int, row: dict[str, str], column: str, low: int, high: int,
         default: int | None = None) -> int:
    text = (row.get(column) or "").strip()
    if not text and default is not None:
        return default
    try:
        value = int(float(text))
        if value != float(text):
            raise ValueError
    except ValueError:
        raise OpenbError(f"{name} line {line}: {column} {text!r} is not a whole number") from None
    if not low <= value <= high:
        raise OpenbError(f"{name} line {line}: {column} {value} is not in {low}..{high}")
    return value


def read_pods(path: str | Path) -> list[Task]:
    """The pods of a pod list, in file order."""
    name = Path(path).name
    tasks = []
    for line, row in _rows(path, POD_COLUMNS):
        cpu = _int(name, line, row, "cpu_milli", 0, 10**7)
        mem = _int(name, line, row, "memory_mib", 0, 10**8)
        gpus = _int(name, line, row, "num_gpu", 0, MAX_GPUS)
        milli = _int(name, line, row, "gpu_milli", 0, WHOLE, default=WHOLE if gpus else 0)
        if gpus == 0:
            milli = 0
        elif milli == 0:
            raise OpenbError(f"{name} line {line}: num_gpu {gpus} with gpu_milli 0")
        elif gpus > 1 and milli != WHOLE:
            raise OpenbError(f"{name} line {line}: num_gpu {gpus} with gpu_milli {milli}: "
                             "only single-GPU tasks share a GPU")
        spec = (row.get("gpu_spec") or "").strip()
        models = frozenset(m.strip() for m in spec.split("|") if m.strip()) or None
        tasks.append(Task(cpu, mem, gpus, milli, models))
    return tasks


def read_nodes(path: str | Path) -> list[NodeKind]:
    """The nodes of a node list, in file order."""
    name = Path(path).name
    nodes = []
    for line, row in _rows(path, NODE_COLUMNS):
        cpu = _int(name, line, row, "cpu_milli", 1, 10**8)
        mem = _int(name, line, row, "memory_mib", 1, 10**9)
        gpus = _int(name, line, row, "gpu", 0, MAX_GPUS)
        model = (row.get("model") or "").strip()
        if gpus and not model:
            raise OpenbError(f"{name} line {line}: a node with {gpus} GPUs and no model")
        nodes.append(NodeKind(model, cpu, mem, gpus))
    return nodes
