"""The commands' one skeleton (cli.core.Command): getopt's errors, the order of --help,
--usage and --version, what a command refuses before its help, and errors to exit codes."""

from __future__ import annotations

import pytest

from cli.core import Args, Command, command, fail
from cli.core.options import NO_ARG, Opt, OptionError, OptionTable

TABLE = OptionTable([Opt("help", "h", NO_ARG), Opt("usage", "", NO_ARG),
                     Opt("version", "V", NO_ARG), Opt("name", "n"), Opt("time", "t")])


def _run(cmd: Command, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = cmd.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _body(args: Args) -> int:
    if "time" in args.given:
        raise OptionError("Invalid --time specification")
    print(f"ran {args.given.get('name')} {args.positional}")
    return 3


def test_help_usage_and_version_are_answered_before_the_body(capsys) -> None:
    cmd = Command("demo", TABLE, _body, help="HELP\n", usage="USAGE\n")
    assert _run(cmd, ["-h", "-n", "x"], capsys) == (0, "HELP\n", "")
    assert _run(cmd, ["--usage"], capsys) == (0, "USAGE\n", "")
    assert _run(cmd, ["-V", "--help"], capsys) == (0, "HELP\n", "")  # help first
    assert _run(cmd, ["-V"], capsys) == (0, "slurm 22.05.8 (kiln)\n", "")
    assert _run(cmd, ["-n", "x", "a"], capsys) == (3, "ran x ['a']\n", "")


def test_the_order_of_answers_and_a_command_without_help(capsys) -> None:
    first_version = Command("demo", TABLE, _body, help="HELP\n", answers=("version", "help"))
    assert _run(first_version, ["-h", "-V"], capsys)[1] == "slurm 22.05.8 (kiln)\n"
    no_help = Command("demo", TABLE, _body)  # -h accepted, answered by nothing but the body
    assert _run(no_help, ["-h", "-n", "y"], capsys) == (3, "ran y []\n", "")


def test_getopt_errors_in_getopts_words_and_values_after_error(capsys) -> None:
    cmd = Command("demo", TABLE, _body, help="HELP\n")
    assert _run(cmd, ["--bogus"], capsys) == (1, "", "demo: unrecognized option '--bogus'\n")
    assert _run(cmd, ["-n"], capsys) == (1, "", "demo: option requires an argument -- 'n'\n")
    bare = Command("demo", TABLE, _body, bare_getopt_errors=True)
    assert _run(bare, ["--bogus"], capsys) == (1, "", "unrecognized option '--bogus'\n")
    assert _run(cmd, ["-t", "x"], capsys) == (1, "", "demo: error: Invalid --time specification\n")


def test_check_refuses_before_the_help_is_answered(capsys) -> None:
    @command("demo", TABLE, help="HELP\n",
             check=lambda args: args.refuse_positional("Unknown arguments: {words}"))
    def demo(args: Args) -> int:
        fail("never reached")

    assert _run(demo, ["--help", "a", "b"], capsys) == (1, "", "demo: error: Unknown arguments: a b\n")
    assert _run(demo, ["--help"], capsys) == (0, "HELP\n", "")
    assert _run(demo, [], capsys) == (1, "", "demo: error: never reached\n")


def test_every_keeps_each_value_in_order() -> None:
    args = Command("demo", TABLE).parse(["-n", "a", "--name=b", "-t1"])
    assert args.every() == {"name": ["a", "b"], "time": ["1"]}
    assert args.given == {"name": "b", "time": "1"}
