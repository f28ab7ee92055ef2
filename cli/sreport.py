"""``sreport``: usage reports over a period, from schedd's ledger, laid out as Slurm's.

Reports: ``cluster Utilization``, ``cluster AccountUtilizationByUser``, ``cluster
UserUtilizationByAccount``, ``user TopUsage``, and kiln's ``cluster AccountCost`` (GPU-hours
per account and GPU type, priced from ``[accounting] gpu_price``). Options: ``-t
minutes|hours|seconds|percent|minper|hourper|secper``, ``-T cpu,gres/gpu,...``, ``-P``, ``-p``,
``-n``; parameters ``start= end= accounts= users= TopCount=``.

Unlike Slurm, whose sreport reads hourly rollups (so the current hour shows nothing), kiln sums
the ledger's jobs directly and does not round the period to hours: ``end=now`` means now.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

from cli.core import Args, CommandError, command, fail, write_lines
from cli.core.client import Client
from cli.core.formats import fmt_time
from cli.core.options import NO_ARG, Opt, OptionTable
from cli.sacct import fit, midnight, parse_time_arg

PROG = "sreport"
RULE = "-" * 80
DAY = 86400

TABLE = OptionTable([
    Opt("all_clusters", "a", NO_ARG), Opt("cluster", "M"), Opt("federation", "", NO_ARG),
    Opt("help", "h", NO_ARG), Opt("local", "", NO_ARG), Opt("noheader", "n", NO_ARG),
    Opt("parsable", "p", NO_ARG), Opt("parsable2", "P", NO_ARG), Opt("quiet", "Q", NO_ARG),
    Opt("sort", "s"), Opt("time-format", "t"), Opt("tres", "T"), Opt("usage", "", NO_ARG),
    Opt("verbose", "v", NO_ARG), Opt("version", "V", NO_ARG),
])

# -t spellings -> (unit seconds or 0 for percent only, with percent, title word)
TIME_FORMATS = {
    "seconds": (1, False, "Seconds"), "minutes": (60, False, "Minutes"),
    "hours": (3600, False, "Hours"), "percent": (0, True, "Percentage of Total"),
    "secper": (1, True, "Seconds/Percentage of Total"),
    "minper": (60, True, "Minutes/Percentage of Total"),
    "hourper": (3600, True, "Hours/Percentage of Total"),
}
CLUSTER_REPORTS = ["AccountUtilizationByUser", "UserUtilizationByAccount", "Utilization",
                   "AccountCost"]
USER_REPORTS = ["TopUsage"]
PARAMS = {"start", "end", "accounts", "account", "users", "user", "topcount", "cluster",
          "clusters"}


@dataclass(slots=True)
class Settings:
    unit: int = 60
    percent: bool = False
    unit_title: str = "Minutes"
    tres: list[str] = field(default_factory=lambda: ["cpu"])
    tres_given: bool = False
    header: bool = True
    delimiter: str | None = None  # None: fixed width
    trailing: bool = False
    start: float = 0.0
    end: float = 0.0
    accounts: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)
    top: int = 10

    @property
    def tres_column(self) -> bool:
        """Slurm shows a 'TRES Name' column once -T is given (cpu alone included)."""
        return self.tres_given

    @property
    def usage_kind(self) -> str:
        return "CPU" if self.tres == ["cpu"] and not self.tres_given else "TRES"


# --- values and layout -----------------------------------------------------------------------


def usage_text(value: float, total: float, s: Settings) -> str:
    """sreport_print_time: whole units rounded, percent with two decimals, or both."""
    pct = 100.0 * value / total if total else 0.0
    if s.percent and not s.unit:
        return f"{pct:.2f}%"
    amount = f"{value / s.unit:.0f}" if s.unit > 1 else str(int(round(value)))
    return f"{amount}({pct:.2f}%)" if s.percent else amount


@dataclass(frozen=True, slots=True)
class Col:
    name: str
    width: int  # right-aligned
    cut: bool = True


def layout(cols: list[Col], rows: list[list[str]], s: Settings) -> list[str]:
    """Header, dashes and rows in sreport's fixed-width or parsable form."""
    if s.delimiter is not None:
        end = s.delimiter if s.trailing else ""
        lines = [s.delimiter.join(c.name for c in cols) + end] if s.header else []
        return lines + [s.delimiter.join(r) + end for r in rows]
    widths = [max([c.width] + [len(r[i]) for r in rows if not c.cut]) for i, c in
              enumerate(cols)]
    lines = []
    if s.header:
        lines.append("".join(c.name[:w].rjust(w) + " " for c, w in zip(cols, widths,
                                                                         strict=True)))
        lines.append("".join("-" * w + " " for w in widths))
    for r in rows:
        lines.append("".join(fit(v, w, c.cut) + " " for v, c, w in zip(r, cols, widths,
                                                                          strict=True)))
    return lines


def title(name: str, s: Settings, secs: bool = True, usage: str | None = None) -> list[str]:
    if not s.header:
        return []
    period = f"{fmt_time(s.start)} - {fmt_time(s.end - 1)}"
    if secs:
        period += f" ({int(s.end - s.start)} secs)"
    if usage is None:
        usage = ("Usage reported in Percentage of Total" if s.percent and not s.unit
                 else f"Usage reported in {s.usage_kind} {s.unit_title}")
    return [RULE, f"{name} {period}", usage, RULE]


def proper_name(login: str) -> str:
    import pwd

    try:
        return pwd.getpwnam(login).pw_gecos.split(",")[0]
    except KeyError:
        return ""


def usage_width(s: Settings, most: float) -> int:
    """sreport_set_usage_col_width: 8, one more per digit of the largest TRES-seconds past
    eight, and 9 more for the value(percent) formats."""
    width, order = 8, 100_000_000
    while most >= order:
        width += 1
        order *= 10
    return width + (9 if s.percent and s.unit else 0)


def usage_col(s: Settings, most: float) -> Col:
    return Col("Used", usage_width(s, most), cut=False)


# --- reports ---------------------------------------------------------------------------------


def utilization(data: dict[str, Any], s: Settings) -> list[str]:
    cols = [Col("Cluster", 9)]
    if s.tres_column:
        cols.append(Col("TRES Name", 14))
    width = usage_width(s, max((float(data["capacity"].get(t, 0.0)) for t in s.tres),
                               default=0.0))
    cols += [Col(n, width, cut=False) for n in ("Allocated", "Down", "PLND Down", "Idle",
                                                  "Planned", "Reported")]
    rows = []
    for tres in s.tres:
        total = float(data["capacity"].get(tres, 0.0))
        if not total:
            continue
        alloc = float(data["allocated"].get(tres, 0.0))
        planned = float(data["planned"].get(tres, 0.0))
        idle = max(total - alloc - planned, 0.0)
        values = [alloc, 0.0, 0.0, idle, planned, total]
        row = [data["cluster"]] + ([tres] if s.tres_column else [])
        rows.append(row + [usage_text(v, total, s) for v in values])
    return title("Cluster Utilization", s, secs=False) + layout(cols, rows, s)


def _assoc_usage(data: dict[str, Any], s: Settings) -> dict[tuple[str, str], dict[str, float]]:
    out: dict[tuple[str, str], dict[str, float]] = {}
    for item in data["assoc"]:
        if s.accounts and item["account"] not in s.accounts:
            continue
        if s.users and item["user"] not in s.users:
            continue
        out[(item["account"], item["user"])] = {k: float(v) for k, v in item["tres"].items()}
    return out


def _tree(data: dict[str, Any], used_accounts: set[str]) -> dict[str, list[str]]:
    """Children of each account, root at the top; accounts the tree lacks hang off root."""
    parents = {a["name"]: a.get("parent") or "" for a in data.get("accounts", [])}
    for name in used_accounts:
        parents.setdefault(name, "root")
    parents.pop("root", None)
    children: dict[str, list[str]] = {}
    for name, parent in parents.items():
        children.setdefault(parent if parent in parents or parent == "root" else "root",
                            []).append(name)
    for kids in children.values():
        kids.sort()
    return children


def account_utilization(data: dict[str, Any], s: Settings) -> list[str]:
    """Root's total, then each account (its subtree's sum) followed by its users, in tree
    order; associations without usage are left out, as Slurm does."""
    usage = _assoc_usage(data, s)
    children = _tree(data, {a for a, _ in usage})
    users_of: dict[str, list[str]] = {}
    for account, user in usage:
        users_of.setdefault(account, []).append(user)

    def subtree(account: str) -> dict[str, float]:
        total: dict[str, float] = {}
        for user in users_of.get(account, []):
            for k, v in usage[(account, user)].items():
                total[k] = total.get(k, 0.0) + v
        for child in children.get(account, []):
            for k, v in subtree(child).items():
                total[k] = total.get(k, 0.0) + v
        return total

    entries: list[tuple[str, str, dict[str, float]]] = []

    def walk(account: str) -> None:
        entries.append((account, "", subtree(account)))
        for user in sorted(users_of.get(account, [])):
            entries.append((account, user, usage[(account, user)]))
        for child in children.get(account, []):
            walk(child)

    walk("root")
    rows = _usage_rows(data, s, entries, account_first=True)
    most = max((t.get(n, 0.0) for _, _, t in entries for n in s.tres), default=0.0)
    return title("Cluster/Account/User Utilization", s) + layout(
        _usage_cols(s, True, most), rows, s)


def _usage_cols(s: Settings, account_first: bool, most: float) -> list[Col]:
    people = [Col("Login", 9), Col("Proper Name", 15)]
    account = [Col("Account", 15)]
    cols = [Col("Cluster", 9)] + (account + people if account_first else people + account)
    if s.tres_column:
        return cols + [Col("TRES Name", 14), usage_col(s, most)]
    return cols + [usage_col(s, most), Col("Energy", 8, cut=False)]


def _usage_rows(data: dict[str, Any], s: Settings, entries: list[tuple[str, str, dict]],
                account_first: bool) -> list[list[str]]:
    rows = []
    for account, user, tres in entries:
        if not any(tres.get(t, 0.0) for t in s.tres):
            continue
        who = [user, proper_name(user) if user else ""]
        lead = [data["cluster"]] + ([account] + who if account_first else who + [account])
        for name in s.tres:
            total = float(data["capacity"].get(name, 0.0))
            used = usage_text(tres.get(name, 0.0), total, s)
            rows.append(lead + ([name, used] if s.tres_column else [used, "0"]))
    return rows


def user_usage(data: dict[str, Any], s: Settings, top: int | None) -> list[str]:
    """One row per user and account, users by their total usage (largest first)."""
    usage = {k: v for k, v in _assoc_usage(data, s).items() if k[1]}
    key = s.tres[0]
    per_user: dict[str, float] = {}
    for (_, user), tres in usage.items():
        per_user[user] = per_user.get(user, 0.0) + tres.get(key, 0.0)
    users = sorted(per_user, key=lambda u: (-per_user[u], u))
    if top is not None:
        users = users[:top]
    entries = []
    for user in users:
        mine = sorted(((a, t) for (a, u), t in usage.items() if u == user),
                      key=lambda at: (-at[1].get(key, 0.0), at[0]))
        entries += [(a, user, t) for a, t in mine]
    rows = _usage_rows(data, s, entries, account_first=False)
    name = f"Top {top} Users" if top is not None else "Cluster/User/Account Utilization"
    most = max((t.get(n, 0.0) for _, _, t in entries for n in s.tres), default=0.0)
    return title(name, s) + layout(_usage_cols(s, False, most), rows, s)


def account_cost(data: dict[str, Any], s: Settings) -> list[str]:
    """kiln's cost report: GPU-hours x price per GPU type for each account, in the account
    tree's order; an account's rows sum its whole subtree, so root's rows are the total."""
    own: dict[str, dict[str, dict[str, float]]] = {}  # account -> type -> hours, cost, price
    for c in data.get("cost", []):
        if s.accounts and c["account"] not in s.accounts:
            continue
        t = own.setdefault(c["account"], {}).setdefault(
            c["gpu_type"], {"gpu_hours": 0.0, "cost": 0.0, "price": c["price"]})
        t["gpu_hours"] += c["gpu_hours"]
        t["cost"] += c["cost"]
    children = _tree(data, set(own))

    def subtree(account: str) -> dict[str, dict[str, float]]:
        total = {k: dict(v) for k, v in own.get(account, {}).items()}
        for child in children.get(account, []):
            for gtype, v in subtree(child).items():
                t = total.setdefault(gtype, {"gpu_hours": 0.0, "cost": 0.0,
                                             "price": v["price"]})
                t["gpu_hours"] += v["gpu_hours"]
                t["cost"] += v["cost"]
        return total

    rows: list[list[str]] = []

    def walk(account: str) -> None:
        for gtype, v in sorted(subtree(account).items()):
            rows.append([data["cluster"], account, gtype, f"{v['gpu_hours']:.4f}",
                         f"{v['price']:.2f}", f"{v['cost']:.2f}"])
        for child in children.get(account, []):
            walk(child)

    walk("root")
    cols = [Col("Cluster", 9), Col("Account", 15), Col("GPU Type", 10),
            Col("GPU Hours", 10, cut=False), Col("Price", 8, cut=False),
            Col("Cost", 10, cut=False)]
    money = data.get("currency") or "price units"
    usage = f"Usage reported in GPU Hours, cost in {money} ([accounting] gpu_price per GPU hour)"
    return title("Cluster/Account GPU Cost", s, usage=usage) + layout(cols, rows, s)


# --- command line ----------------------------------------------------------------------------


def pick(word: str, names: list[str]) -> str | None:
    """A report name, any case, or an unambiguous prefix of one."""
    low = word.lower()
    exact = [n for n in names if n.lower() == low]
    if exact:
        return exact[0]
    hits = [n for n in names if n.lower().startswith(low)]
    return hits[0] if len(hits) == 1 else None


def invalid_report(kind: str, word: str, names: list[str]) -> CommandError:
    quoted = [f'"{n}"' for n in sorted(names)]
    listed = ", ".join(quoted[:-1]) + f", and {quoted[-1]}" if len(quoted) > 1 else quoted[0]
    return CommandError(f"Not valid report {word}", f"Valid {kind} reports are, {listed}",
                        prefixed=False)


def settings_from(values: dict[str, str | None], params: list[str], now: float) -> Settings:
    s = Settings()
    if values.get("time-format"):
        word = values["time-format"].strip().lower()
        chosen = pick(word, list(TIME_FORMATS)) if word else None
        if chosen is None:
            fail(f"unknown time format {values['time-format']}")
        s.unit, s.percent, s.unit_title = TIME_FORMATS[chosen]
    if values.get("tres"):
        s.tres = [t.strip() for t in values["tres"].split(",") if t.strip()]
        s.tres_given = True
    s.header = "noheader" not in values
    if "parsable" in values or "parsable2" in values:
        s.delimiter, s.trailing = "|", "parsable" in values
    start = end = None
    for param in params:
        key, eq, value = param.partition("=")
        key = key.strip().lower()
        if not eq or key not in PARAMS:
            fail(f"Unknown condition: {param}")
        if key == "start":
            start = parse_time_arg(value, now, "start")
        elif key == "end":
            end = parse_time_arg(value, now, "end")
        elif key in ("accounts", "account"):
            s.accounts = {v for v in value.split(",") if v}
        elif key in ("users", "user"):
            s.users = {v for v in value.split(",") if v}
        elif key == "topcount":
            if not value.isdigit() or not int(value):
                fail(f"Invalid TopCount: {value}")
            s.top = int(value)
    if start is None and end is None:  # Slurm's default period: yesterday
        end = midnight(now)
        start = midnight(end - 1)
    elif end is None:
        end = now
    elif start is None:
        start = midnight(end - 1)
    if end <= start:
        fail("the period's end must be after its start")
    s.start, s.end = float(start), float(min(end, now))
    return s


def check_tres(data: dict[str, Any], s: Settings) -> None:
    known = set(data.get("capacity", {})) | {"energy"}
    for name in s.tres:
        if name not in known and not name.startswith("gres/gpu:"):
            fail(f"Invalid TRES: {name}")


USAGE = """Usage: sreport [-t minutes|hours|seconds|percent] [-T tres] [-P|-p] [-n] COMMAND
  cluster Utilization | AccountUtilizationByUser | UserUtilizationByAccount | AccountCost
  user TopUsage
  parameters: start=TIME end=TIME accounts=A,B users=U,V TopCount=N
"""


@command(PROG, TABLE, help=USAGE)
def sreport(args: Args) -> int:
    values, positional = args.given, args.positional
    if not positional:
        fail("no report asked for (kiln's sreport is not interactive); see sreport --help")
    kind = pick(positional[0], ["cluster", "user"])
    if kind is None:
        raise CommandError(f"invalid keyword: {positional[0]}", prefixed=False)
    if len(positional) < 2:
        fail(f"no {kind} report named; see sreport --help")
    names = CLUSTER_REPORTS if kind == "cluster" else USER_REPORTS
    report = pick(positional[1], names)
    if report is None:
        raise invalid_report(kind, positional[1], names)
    now = time.time()
    s = settings_from(values, positional[2:], now)
    with Client() as client:
        data = client.call("acct_report", {"start": s.start, "end": s.end})
    s.start, s.end = float(data["start"]), float(data["end"])
    check_tres(data, s)
    if report == "Utilization":
        lines = utilization(data, s)
    elif report == "AccountUtilizationByUser":
        lines = account_utilization(data, s)
    elif report == "UserUtilizationByAccount":
        lines = user_usage(data, s, None)
    elif report == "AccountCost":
        lines = account_cost(data, s)
    else:
        lines = user_usage(data, s, s.top)
    write_lines(lines)
    return 0


main = sreport.main


if __name__ == "__main__":
    sys.exit(main())
