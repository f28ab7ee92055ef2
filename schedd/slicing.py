"""Long requests in short slices: what keeps one user's big query from stalling the loop.

schedd answers everyone from one thread (schedd/daemon.py), so a request holds every other
user for as long as it runs. A handler with a lot to do (sacct over the whole ledger, a full
listing of 10,000 jobs) is written as a generator that yields between slices
(``localsock.Work``); the loop runs other users' requests, the cycle and the timers between
them. What bounds a slice here:

- ``each``: calls a function on every item, yielding whenever ``SLICE_SECONDS`` of it has
  passed, so a slice is as long on a slow host as on a fast one (a count per slice is not:
  the same 500 rows took 20 ms on an idle machine and 270 ms on a loaded one);
- ``encode_reply``: ``protocol.reply_ok``'s exact bytes, with each long list of the body
  encoded ``ENCODE_ITEMS`` items at a time (20,000 sacct rows are 60 MB of JSON: half a
  second as one call of the encoder).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator
from types import CodeType
from typing import Any, TypeVar

from kiln.wire import protocol, wirejson

LIGHT: set[CodeType] = set()  # generator handlers marked ``light``

SLICE_SECONDS = 0.005  # how long a long request's slice runs before it yields
ENCODE_ITEMS = 200  # list items encoded per slice (a sacct row is ~3 kB of JSON)

T = TypeVar("T")


def light(fn: Callable[..., Generator[Any, None, Any]]) -> Callable[..., Generator[Any, None, Any]]:
    """Mark a generator handler whose request holds no reply body while it runs (a big
    scancel, a slice of jobs at a time): the server steps it beside the user's long requests
    being built, not behind them (``localsock.Work.light``)."""
    LIGHT.add(fn.__code__)
    return fn


def each(items: Iterable[T], fn: Callable[[T], object],
         seconds: float | None = None) -> Iterator[None]:
    """``fn(item)`` for every item, yielding each time ``seconds`` (``SLICE_SECONDS``) of it
    have passed (the clock starts again when the loop resumes the generator, not when it
    yielded)."""
    seconds = SLICE_SECONDS if seconds is None else seconds
    started = time.perf_counter()
    for item in items:
        fn(item)
        if time.perf_counter() - started >= seconds:
            yield
            started = time.perf_counter()


def encode_reply(msg_id: Any, body: dict[str, Any]) -> Generator[None, None, list[bytes]]:
    """``stream_reply``'s pieces gathered, yielding between them (a reply held whole)."""
    parts: list[bytes] = []
    for piece in stream_reply(msg_id, body):
        parts.append(piece)
        yield
    return parts


def stream_reply(msg_id: Any, body: dict[str, Any]) -> Iterator[bytes]:
    """``protocol.reply_ok(msg_id, body)``, byte for byte once joined, a piece at a time: the
    body's lists of more than ``ENCODE_ITEMS`` items go ``ENCODE_ITEMS`` items a piece, the
    rest at once. Each piece is made only when asked for: a streamed reply
    (``localsock.Stream``) asks as its client reads, so the bytes schedd holds for a slow
    reader are one piece, whatever the reply's size.

    The body is the request's own and its long lists are consumed: each piece's items are let
    go (set to None) once encoded, so that freeing 60,000 sacct rows is spread over the
    slices too (at the end, in one go, it took 38 ms)."""
    head = [b'{"v":', _dump(protocol.VERSION), b',"id":', _dump(msg_id), b',"ok":true,"body":{']
    for n, (key, value) in enumerate((body or {}).items()):
        head += [b"," if n else b"", _dump(key), b":"]
        if not isinstance(value, list) or len(value) <= ENCODE_ITEMS:
            head.append(_dump(value))
            continue
        yield b"".join(head) + b"["
        head = []
        for i in range(0, len(value), ENCODE_ITEMS):
            piece = value[i:i + ENCODE_ITEMS]
            text = _dump(piece)
            value[i:i + ENCODE_ITEMS] = [None] * len(piece)
            del piece  # the last reference to these items: freed in this slice
            yield text[1:-1] if not i else b"," + text[1:-1]
        head.append(b"]")
    head.append(b"}}")
    yield b"".join(head)


def pieces_left(body: dict[str, Any], done: int) -> int:
    """How many pieces ``stream_reply`` makes of ``body`` in all, less ``done``."""
    total = 1 + sum(-(-len(v) // ENCODE_ITEMS) + 1 for v in (body or {}).values()
                    if isinstance(v, list) and len(v) > ENCODE_ITEMS)
    return max(0, total - done)


def _dump(value: Any) -> bytes:
    return wirejson.dumps(value).encode()
