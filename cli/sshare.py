"""``sshare``: the fair-share tree with the numbers the priority uses (schedd computes them
with ``scheduler/fairshare.py``; this side picks the rows and lays them out as Slurm does).

Without ``-a`` the accounts are shown with the caller's own user rows only; ``-a`` shows every
user, ``-u`` the named users, ``-A`` the named accounts' subtrees, ``-U`` user rows only.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from cli.core import Args, command, fail
from cli.core.client import Client
from cli.core.options import NO_ARG, Opt, OptionTable
from cli.sacctmgr import table

PROG = "sshare"

TABLE = OptionTable([
    Opt("all", "a", NO_ARG), Opt("accounts", "A"), Opt("long", "l", NO_ARG),
    Opt("parsable", "p", NO_ARG), Opt("parsable2", "P", NO_ARG), Opt("users", "u"),
    Opt("Users", "U", NO_ARG), Opt("format", "o"), Opt("noheader", "n", NO_ARG),
    Opt("verbose", "v", NO_ARG), Opt("help", "h", NO_ARG), Opt("clusters", "M"),
    Opt("partition", "m", NO_ARG),
])

# field (lower case) -> (header, width, getter)
FIELDS: dict[str, tuple[str, int, Any]] = {
    "account": ("Account", 20, lambda r: " " * r["depth"] + r["account"]),
    "user": ("User", 10, lambda r: r["user"]),
    "rawshares": ("RawShares", 10, lambda r: "" if r["raw_shares"] is None
                  else str(r["raw_shares"])),
    "normshares": ("NormShares", 11, lambda r: f"{r['norm_shares']:.6f}"),
    "rawusage": ("RawUsage", 11, lambda r: str(int(r["raw_usage"]))),
    "normusage": ("NormUsage", 11, lambda r: "" if r["depth"] == 0 and not r["user"]
                  else f"{r['norm_usage']:.6f}"),
    "effectvusage": ("EffectvUsage", 13, lambda r: f"{r['effective_usage']:.6f}"),
    "fairshare": ("FairShare", 10, lambda r: "" if r["fairshare"] is None
                  else f"{r['fairshare']:.6f}"),
    "levelfs": ("LevelFS", 10, lambda r: r["level_fs"] if isinstance(r["level_fs"], str)
                else f"{r['level_fs']:.6f}"),
    "grptresmins": ("GrpTRESMins", 30, lambda r: r["grp_tres_mins"]),
    "tresrunmins": ("TRESRunMins", 30, lambda r: ""),
}
SHORT = "Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare"
LONG = ("Account,User,RawShares,NormShares,RawUsage,NormUsage,EffectvUsage,FairShare,LevelFS,"
        "GrpTRESMins,TRESRunMins")


def main(argv: Sequence[str] | None = None) -> int:
    return sshare.main(argv)


# -h is accepted and answers nothing of its own (kiln's sshare has no help text)
@command(PROG, TABLE, bare_getopt_errors=True)
def sshare(args: Args) -> int:
    args.refuse_positional("unrecognized argument '{first}'")
    opts = args.given
    with Client() as client:
        reply = client.call("sshare", {})
    rows = select(reply["rows"], opts, reply.get("me", ""))
    fmt = opts.get("format") or (LONG if "long" in opts else SHORT)
    for line in layout(rows, fmt, opts):
        print(line)
    return 0


def _list(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]


def select(rows: list[dict[str, Any]], opts: dict[str, Any], me: str) -> list[dict[str, Any]]:
    users = _list(opts.get("users"))
    accounts = _list(opts.get("accounts"))
    if accounts:
        rows = subtrees(rows, accounts)
    if "Users" in opts:
        wanted = users or ([] if "all" in opts else [me])
        return [r for r in rows if r["user"] and (not wanted or r["user"] in wanted)]
    if "all" in opts:
        return rows
    wanted = users or [me]
    return [r for r in rows if not r["user"] or r["user"] in wanted]


def subtrees(rows: list[dict[str, Any]], accounts: list[str]) -> list[dict[str, Any]]:
    """The named accounts and everything below them, re-indented from depth 0."""
    out: list[dict[str, Any]] = []
    base = None
    for r in rows:
        if base is not None and r["depth"] <= base:
            base = None
        if base is None and not r["user"] and r["account"] in accounts:
            base = r["depth"]
        if base is not None:
            out.append({**r, "depth": r["depth"] - base})
    return out


def layout(rows: list[dict[str, Any]], fmt: str, opts: dict[str, Any]) -> list[str]:
    cols = []
    for item in fmt.split(","):
        name, _, width = item.strip().partition("%")
        field = FIELDS.get(name.lower())
        if field is None:
            fail(f"Invalid field requested: \"{name}\"")
        try:
            size = int(width) if width else field[1]
        except ValueError:
            fail(f"Invalid field width '{item}'")
        cols.append((field[0], size, field[2], name.lower() == "account"))
    return table([(h, w, left) for h, w, _, left in cols],
                 [[get(r) for _, _, get, _ in cols] for r in rows], opts)


if __name__ == "__main__":
    sys.exit(main())
