"""Slurm hostlist expressions: ``gpu[01-03,07],login`` <-> a list of names.

Used for SLURM_JOB_NODELIST, squeue's NODELIST, ``-w``/``-x`` and ``scontrol show hostnames``.
Standard library only.
"""

from __future__ import annotations

_RANGE = r"^(\d+)(?:-(\d+))?$"
# The most names one expression may expand to, all its items together: more nodes than any
# cluster kiln runs (Slurm's node table is of that order), so a short expression such as
# ``a[0-99999],b[0-99999],...`` cannot make schedd build millions of names.
MAX_NAMES = 65_536


class HostlistError(ValueError):
    pass


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced brackets in {expr!r}")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unbalanced brackets in {expr!r}")
    parts.append(expr[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_one(item: str, budget: int) -> list[str]:
    """The names of one comma-free item, at most ``budget`` of them (HostlistError beyond)."""
    import re  # here, not at the top: compress (every sinfo, squeue) needs none of it

    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    prefix, body, rest = item[: m.start()], m.group(1), item[m.end():]
    tails = _expand_one(rest, budget)
    names: list[str] = []
    for piece in body.split(","):
        r = re.match(_RANGE, piece.strip())
        if not r:
            raise HostlistError(f"bad range {piece!r} in {item!r}")
        lo_s, hi_s = r.group(1), r.group(2) or r.group(1)
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise HostlistError(f"bad range {piece!r} in {item!r}")
        if len(names) + (hi - lo + 1) * len(tails) > budget:
            raise HostlistError(f"hostlist too large (more than {MAX_NAMES} names)")
        width = len(lo_s) if lo_s.startswith("0") else 0
        for n in range(lo, hi + 1):
            for tail in tails:
                names.append(f"{prefix}{n:0{width}d}{tail}")
    return names


def expand(expr: str) -> list[str]:
    """'a[1-3],b' -> ['a1', 'a2', 'a3', 'b'] (order kept, duplicates dropped); HostlistError
    when the whole expression names more than MAX_NAMES (counted before any is built)."""
    seen: dict[str, None] = {}
    produced = 0
    for item in _split_top(expr):
        names = _expand_one(item, MAX_NAMES - produced)
        produced += len(names)
        if produced > MAX_NAMES:
            raise HostlistError(f"hostlist too large (more than {MAX_NAMES} names)")
        for name in names:
            seen.setdefault(name, None)
    return list(seen)


def _trailing_digits(name: str) -> tuple[str, str]:
    """'gpu017' -> ('gpu', '017'); 'login' -> ('login', '')."""
    i = len(name)
    while i and name[i - 1].isdecimal():
        i -= 1
    return name[:i], name[i:]


def compress(names: list[str]) -> str:
    """['a1', 'a2', 'a3', 'b'] -> 'a[1-3],b', Slurm's spelling (zero padding kept)."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for name in names:
        prefix, digits = _trailing_digits(name)
        if not digits:
            order.append(name)
            continue
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        key = (prefix, width)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))
    out: list[str] = []
    for key in order:
        if isinstance(key, str):
            out.append(key)
            continue
        prefix, width = key
        nums = sorted(set(groups[key]))
        if len(nums) == 1:
            out.append(f"{prefix}{nums[0]:0{width}d}")
            continue
        ranges, lo, prev = [], nums[0], nums[0]
        for n in nums[1:] + [None]:  # type: ignore[list-item]
            if n is not None and n == prev + 1:
                prev = n
                continue
            ranges.append(f"{lo:0{width}d}" if lo == prev else f"{lo:0{width}d}-{prev:0{width}d}")
            if n is not None:
                lo = prev = n
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(out)
