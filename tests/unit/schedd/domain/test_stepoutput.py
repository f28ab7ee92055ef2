"""schedd.domain.stepoutput: the bounded, in-order buffer of a step's forwarded output."""

from __future__ import annotations

import base64

from schedd.domain.stepoutput import StepOutput, parse_cursors

OUT, ERR = (0, "out"), (1, "err")


def _text(chunks: list[list]) -> dict[tuple[int, str], tuple[int, bytes]]:
    return {(c[0], c[1]): (c[2], base64.b64decode(c[3])) for c in chunks}


def test_chunks_are_taken_in_order_and_every_reply_is_the_next_offset() -> None:
    buf = StepOutput()
    assert buf.accept(OUT, 0, b"hello ") == 6
    assert buf.accept(OUT, 6, b"world\n") == 12
    assert buf.accept(ERR, 0, b"oops") == 4
    assert _text(buf.chunks()) == {OUT: (0, b"hello world\n"), ERR: (0, b"oops")}
    assert buf.size == 16


def test_duplicates_gaps_and_empty_chunks_are_ignored() -> None:
    buf = StepOutput()
    buf.accept(OUT, 0, b"abc")
    assert buf.accept(OUT, 0, b"abc") == 3  # a resend of what was taken
    assert buf.accept(OUT, 1, b"bcd") == 3  # an overlap
    assert buf.accept(OUT, 7, b"later") == 3  # after a lost chunk
    assert buf.accept(OUT, 3, b"") == 3
    assert _text(buf.chunks()) == {OUT: (0, b"abc")}


def test_a_full_step_refuses_until_srun_reads() -> None:
    buf = StepOutput(cap=10)
    assert buf.accept(OUT, 0, b"12345678") == 8
    assert buf.accept(ERR, 0, b"abc") == 0  # no room: the agent tries again later
    assert buf.refused == 1
    buf.trim({OUT: 8})
    assert buf.size == 0
    assert buf.accept(ERR, 0, b"abc") == 3


def test_srun_cursors_release_what_it_wrote_and_chunks_are_bounded() -> None:
    buf = StepOutput()
    buf.accept(OUT, 0, b"0123456789")
    buf.accept(ERR, 0, b"abcdef")
    buf.trim({OUT: 4, ERR: 100, (9, "out"): 5})  # past the end, or no such stream: harmless
    assert _text(buf.chunks()) == {OUT: (4, b"456789")}
    assert buf.size == 6
    buf.trim({OUT: 2})  # behind: nothing to drop
    assert buf.accept(OUT, 10, b"X") == 11
    assert _text(buf.chunks(limit=3)) == {OUT: (4, b"456")}
    assert not buf.drained
    buf.trim({OUT: 11})
    assert buf.drained and buf.chunks() == []


def test_abandoned_output_is_dropped_and_agents_are_still_acknowledged() -> None:
    buf = StepOutput(cap=4)
    buf.accept(OUT, 0, b"1234")
    buf.abandon()
    assert buf.drained
    assert buf.accept(OUT, 4, b"56789") == 9  # taken and thrown away: the agent can finish
    assert buf.drained


def test_cursors_are_parsed_leniently() -> None:
    assert parse_cursors([[0, "out", 5], [1, "err", 2], [True, "out", 1], [2, "in", 3],
                          "junk", [3, "out"]]) == {(0, "out"): 5, (1, "err"): 2}
