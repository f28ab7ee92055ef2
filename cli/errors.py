"""How the Slurm-named commands fail: one line on stderr, exit 1, never a traceback.

Every command's ``main`` goes through ``run_command``: a ``CommandError`` carries the exact text
Slurm would print (``sbatch: error: ...`` or a bare ``slurm_load_jobs error: ...``), a
``ClientError`` that nobody translated becomes ``<prog>: error: <message>``, and anything
unexpected is still reduced to one line, because scripts parse our stderr and people read it.
"""

import os
import sys

TYPE_CHECKING = False  # typing and collections cost every command ms to import: checkers only
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import NoReturn


class CommandError(Exception):
    """A user-facing failure. ``lines`` are printed one per line; with ``prefixed`` each gets
    ``<prog>: error: `` in front (Slurm's ``error()``), without it they are printed verbatim."""

    def __init__(self, *lines: str, prefixed: bool = True, exit_code: int = 1):
        super().__init__(lines[0] if lines else "")
        self.lines = lines
        self.prefixed = prefixed
        self.exit_code = exit_code


def fail(*lines: str, prefixed: bool = True) -> "NoReturn":
    """Raise the ``CommandError`` that ``run_command`` prints."""
    raise CommandError(*lines, prefixed=prefixed)


def report(prog: str, err: "CommandError") -> int:
    for line in err.lines:
        print(f"{prog}: error: {line}" if err.prefixed else line, file=sys.stderr)
    return err.exit_code


def run_command(prog: str, body: "Callable[[Sequence[str]], int]",
                argv: "Sequence[str] | None" = None) -> int:
    """Run a command's body and turn every failure into Slurm-style stderr and an exit code."""
    from cli.client import ClientError  # already imported by every command that talks to schedd
    from kiln.paths import ConfigError

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return body(args)
    except CommandError as err:
        return report(prog, err)
    except ClientError as err:
        print(f"{prog}: error: {err.message}", file=sys.stderr)
        return 1
    except ConfigError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `squeue | head`: the reader left. Point stdout at /dev/null so the interpreter's
        # final flush does not print a second complaint.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the promise is: never a traceback
        print(f"{prog}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def exit_now(code: "int | None") -> "NoReturn":
    """End a short command (its script's last line): flush what it printed, then leave with
    ``os._exit``. The interpreter's own exit frees every module and object one by one, which
    costs a command some 2-3 ms of CPU (a sixth of Python's start) for nothing. If a flush
    fails (the reader of a pipe left), the ordinary exit takes over, as before."""
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # noqa: BLE001 - the interpreter's exit says what it always said
        sys.exit(code)
    os._exit(code or 0)


NODE_CONFIG = "Requested node configuration is not available"


def submit_failure(message: str, lead: str) -> "list[str]":
    """The lines (each printed after ``<prog>: error: ``) for schedd's refusal of a
    submission: ``lead`` is sbatch's ``Batch job submission failed`` or srun's ``Unable to
    allocate resources``.

    Slurm prints a limit's name on its own line first (``AssocMaxSubmitJobLimit``), then
    ``<lead>: <policy line>``: a multi-line message keeps that shape. A shape no node can hold
    is the exception: Slurm's ``<lead>: Requested node configuration is not available`` comes
    first, as scripts match it, and kiln's line naming the resource that does not fit
    follows."""
    lines = message.split("\n") or [""]
    if lines[0] == NODE_CONFIG:
        return [f"{lead}: {lines[0]}", *lines[1:]]
    *first, last = lines
    return [*first, f"{lead}: {last}"]
