"""The commands' core: one skeleton for every Slurm-named command, and how they fail.

``Command`` is what every command is made of (as pip's base command is every pip command's):
its table parsed the getopt way (a bad option in getopt's words), ``--help``, ``--usage`` and
``--version`` answered, then the command's own body, and every failure turned into Slurm's
stderr and an exit status, here once. A command whose Slurm answers the help at another point
(after its environment, after its refusals) calls the same steps in its own order.

How they fail: one line on stderr, exit 1, never a traceback. Every command's ``main`` goes
through ``run_command``: a ``CommandError`` carries the exact text Slurm would print
(``sbatch: error: ...`` or a bare ``slurm_load_jobs error: ...``), a ``ClientError`` that
nobody translated becomes ``<prog>: error: <message>``, and anything unexpected is still
reduced to one line, because scripts parse our stderr and people read it.
"""

import os
import sys

TYPE_CHECKING = False  # typing and collections cost every command ms to import: checkers only
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn

    from cli.core.options import OptionError, OptionTable, Parsed

VERSION = "slurm 22.05.8 (kiln)\n"  # what --version prints (the Slurm release kiln speaks)


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
    # already imported by every command that talks to schedd
    from cli.core.client import ClientError
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


class Args:
    """What a command line said: the (option, value) pairs in order, the positional words, and
    ``given``: each option's dest with its last value (a later one wins, as in Slurm)."""

    __slots__ = ("parsed", "positional", "given")

    def __init__(self, parsed: "Parsed", positional: "list[str]"):
        self.parsed = parsed
        self.positional = positional
        self.given = {opt.dest: value for opt, value in parsed}

    def every(self) -> "dict[str, list[str | None]]":
        """Each dest with all its values in order (``-j 1 -j 2``, ``-o a -o b``)."""
        values: dict[str, list[str | None]] = {}
        for opt, value in self.parsed:
            values.setdefault(opt.dest, []).append(value)
        return values

    def refuse_positional(self, message: str) -> None:
        """Fail with ``message`` (``{words}``: all of them, ``{first}``: the first) if any."""
        if self.positional:
            fail(message.format(words=" ".join(self.positional), first=self.positional[0]))


def write_lines(lines: "list[str]") -> None:
    """A command's output lines on stdout, in one write (none: nothing, not an empty line)."""
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")


def warn_ignored(prog: str, given: "dict[str, str | None]", ignored: "dict[str, str]") -> None:
    """One ``<prog>: warning: --NAME is ignored: WHY`` line per ignored option given."""
    for dest, why in ignored.items():
        if dest in given:
            print(f"{prog}: warning: --{dest} is ignored: {why}", file=sys.stderr)


class Command:
    """One command: its name, option table and texts, and its body (``Args`` -> exit status).

    ``main`` is the whole flow: parse, ``check`` (what the command refuses before it answers
    the help), ``--help``/``--usage``/``--version``, the body; every error to an exit status.
    ``help`` is printed as it stands (its newlines included); ``usage`` defaults to it; a
    command without ``help`` does not answer ``--help``; ``answers``: which flag wins when
    several are given (scontrol's --version comes first). ``bare_getopt_errors``: getopt's
    message without ``<prog>: `` in front (Getopt::Long's seff, and sacctmgr and sshare)."""

    def __init__(self, prog: str, table: "OptionTable",
                 body: "Callable[[Args], int] | None" = None, *,
                 help: "str | None" = None, usage: "str | None" = None,  # noqa: A002
                 version: "str | None" = VERSION, stop_at_positional: bool = False,
                 check: "Callable[[Args], None] | None" = None,
                 answers: "tuple[str, ...]" = ("help", "usage", "version"),
                 bare_getopt_errors: bool = False):
        self.prog = prog
        self.table = table
        self.body = body
        self.help = help
        self.usage = usage
        self.version = version
        self.stop_at_positional = stop_at_positional
        self.check = check
        self.answers = answers
        self.bare_getopt_errors = bare_getopt_errors

    def main(self, argv: "Sequence[str] | None" = None) -> int:
        return run_command(self.prog, self.invoke, argv)

    def invoke(self, argv: "Sequence[str]") -> int:
        """The command line to an exit status; a failure raised as a ``CommandError`` (a bad
        option value's ``OptionError`` too: ``<prog>: error: <message>``)."""
        from cli.core.options import OptionError

        args = self.parse(argv)
        if self.check is not None:
            self.check(args)
        if self.answer(args.given):
            return 0
        assert self.body is not None
        try:
            return self.body(args)
        except OptionError as exc:  # a bad value (a time, a size, a directive's quote)
            raise CommandError(exc.message, prefixed=exc.prefixed) from None

    def parse(self, argv: "Sequence[str]") -> "Args":
        """The command line by the table; a bad one raises getopt's line as a CommandError."""
        from cli.core.options import OptionError, parse_argv

        try:
            return Args(*parse_argv(argv, self.table, stop_at_positional=self.stop_at_positional))
        except OptionError as exc:
            raise self.option_error(exc) from None

    def option_error(self, exc: "OptionError") -> "CommandError":
        """getopt's ``<prog>: <message>``; a bad value's ``<prog>: error: <message>``."""
        if self.bare_getopt_errors:
            return CommandError(exc.message, prefixed=exc.prefixed)
        if exc.prefixed:
            return CommandError(exc.message)
        return CommandError(f"{self.prog}: {exc.message}", prefixed=False)

    def answer(self, given: "dict[str, str | None]") -> bool:
        """Print what --help, --usage or --version asks for (the first of ``answers`` given)."""
        texts = {"help": self.help, "usage": self.help if self.usage is None else self.usage,
                 "version": self.version}
        flag = next((flag for flag in self.answers if flag in given), None)
        text = None if flag is None else texts[flag]
        if text is None:
            return False
        sys.stdout.write(text)
        return True


def command(prog: str, table: "OptionTable", **texts: "Any") -> "Callable[[Callable[[Args], int]], Command]":
    """``@command(PROG, TABLE, help=...)`` over a body makes it a ``Command``."""
    def make(body: "Callable[[Args], int]") -> "Command":
        return Command(prog, table, body, **texts)
    return make


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
