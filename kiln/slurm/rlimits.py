"""Slurm's PropagateResourceLimits: the submitter's soft resource limits (``ulimit -S``) and
umask reach the job's processes, as sbatch and srun carry them.

The command puts its own soft limits in the job's environment as ``SLURM_RLIMIT_<NAME>`` (a
number; RLIM_INFINITY as the unsigned ``2**64-1``, as Slurm writes it) and its umask as
``SLURM_UMASK`` (octal). The node's agent takes the ``SLURM_RLIMIT_*`` variables out of the
environment it execs with (a Slurm job never sees them), and in the job's child, between fork
and exec, sets each limit the site propagates (``[agent] propagate_resource_limits``, Slurm's
PropagateResourceLimits / PropagateResourceLimitsExcept) as the soft limit. A limit above the
node's hard limit is not raised: the job gets Slurm's line on its stderr, ``slurmstepd:
error: Can't propagate RLIMIT_NOFILE of 100000 from submit host: Operation not permitted``,
and keeps the node's limit.

Standard library only (``resource`` is loaded when a limit is read or set, not at import).
"""

import os  # no __future__: sbatch loads this module on its fast path, annotations are real

NAMES = ("AS", "CORE", "CPU", "DATA", "FSIZE", "MEMLOCK", "NOFILE", "NPROC", "RSS", "STACK")
PREFIX = "SLURM_RLIMIT_"
UNLIMITED = 2**64 - 1  # RLIM_INFINITY as Slurm's commands print it (%lu)


class LimitsError(ValueError):
    """A PropagateResourceLimits setting that names no limit Slurm knows."""


def submitted() -> dict[str, str]:
    """What a submitting command adds to the job's environment: its umask and soft limits."""
    import resource

    old = os.umask(0o022)
    os.umask(old)
    env = {"SLURM_UMASK": f"{old:04o}"}
    for name in NAMES:
        soft = resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))[0]
        env[PREFIX + name] = str(UNLIMITED if soft == resource.RLIM_INFINITY else soft)
    return env


def propagated(names: str, except_names: str = "") -> frozenset[str]:
    """``ALL`` (Slurm's default), ``NONE`` or a comma list of NAMES, less ``except_names``."""
    def words(text: str) -> set[str]:
        found = {w.strip().upper() for w in text.split(",") if w.strip()}
        unknown = sorted(found - {*NAMES, "ALL", "NONE"})
        if unknown:
            raise LimitsError(f"unknown resource limit {unknown[0]!r}: ALL, NONE or any of "
                              f"{', '.join(NAMES)}")
        return found

    chosen = words(names)
    if "NONE" in chosen:
        base: set[str] = set()
    elif "ALL" in chosen or not chosen:
        base = set(NAMES)
    else:
        base = chosen
    return frozenset(base - (words(except_names) - {"ALL", "NONE"}))


def take(env: dict[str, str]) -> tuple[dict[str, str], dict[str, int]]:
    """The environment without ``SLURM_RLIMIT_*``, and the limits they carried (bad ones
    dropped: a limit the agent cannot read is a limit it does not set)."""
    kept: dict[str, str] = {}
    limits: dict[str, int] = {}
    for key, value in env.items():
        if not key.startswith(PREFIX):
            kept[key] = value
            continue
        name = key[len(PREFIX):]
        try:
            number = int(value.lstrip("U"))  # Slurm marks an explicit --propagate with U
        except ValueError:
            continue
        if name in NAMES and 0 <= number <= UNLIMITED:
            limits[name] = number
    return kept, limits


def apply(limits: dict[str, int]) -> list[str]:
    """Set each limit as the soft limit of this process (the job's child, before exec); the
    lines of those above the hard limit, left as they were."""
    import resource

    errors = []
    for name, value in sorted(limits.items()):
        which = getattr(resource, f"RLIMIT_{name}")
        soft, hard = resource.getrlimit(which)
        wanted = resource.RLIM_INFINITY if value == UNLIMITED else value
        if hard != resource.RLIM_INFINITY and (wanted == resource.RLIM_INFINITY or
                                               wanted > hard):
            errors.append(f"slurmstepd: error: Can't propagate RLIMIT_{name} of "
                          f"{'unlimited' if value == UNLIMITED else value} from submit host: "
                          f"Operation not permitted\n")
            continue
        if wanted != soft:
            try:
                resource.setrlimit(which, (wanted, hard))
            except (OSError, ValueError) as exc:
                errors.append(f"slurmstepd: error: Can't propagate RLIMIT_{name} of {value} "
                              f"from submit host: {getattr(exc, 'strerror', None) or exc}\n")
    return errors
