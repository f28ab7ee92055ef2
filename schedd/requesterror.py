"""``RequestError``: the caller asked for something that cannot be done. A module of its own,
below everything that raises it (the handlers, the lifecycle, the offload worker), so that the
services object (``schedd/context.py``) can name its members' types without a circle."""

from __future__ import annotations

from kiln.wire import protocol


class RequestError(Exception):
    """The caller asked for something that cannot be done; ``message`` is Slurm's text."""

    def __init__(self, message: str, code: str = protocol.E_INVALID):
        super().__init__(message)
        self.code = code
        self.message = message
