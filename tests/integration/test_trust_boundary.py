"""The trust boundary, end to end, from a second, unprivileged Unix user through the Python API
(``cli.core.client.Client`` over schedd's ipc socket, in a process of that user):

- the issue's reproduction: a submission that plants server-owned state (``extra``:
  ``admin_priority``, ``run_limit``) is refused with an error naming the field and creates no
  job; the same job without it runs, ends TIMEOUT at its own 5 s limit, and its priority is the
  one schedd computed;
- every client op, with an unknown field, a misspelled field and wrongly typed values for each
  of its fields (nested ones too), is refused (``bad_request``) with a message naming the field,
  and nothing in the ledger changes;
- submissions whose fields once crashed schedd are refused or accepted with an error, and schedd
  still answers and runs a normal job afterwards.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from kiln.wire import operations, protocol
from kiln.wire.protocol import Field
from schedd.lifecycle.admission import NODE_CONFIG
from tests.integration.cluster import BIN, Cluster, until

PLANTED_PRIORITY = 1_000_000

# One connection, as the caller: read [[op, body], ...] on stdin, print each outcome. Mode
# "client": through cli.core.client.Client (the Python API); after a request it got no answer to,
# the rest are not sent (so a schedd that answers no more costs one timeout, not hundreds).
# Mode "raw": a bare DEALER that records every reply as it comes, with whether its id is the
# request's (cli.core.client.Client drops a reply whose id is not, and reports the request
# unanswered: "unreachable"), so that every case is seen even then.
_AS_USER = r"""
import json, sys
from cli.core.client import Client, ClientError
from kiln.wire import protocol
endpoint, mode = sys.argv[1], sys.argv[2]
requests = json.load(sys.stdin)
out = []
if mode == "client":
    with Client(endpoint=endpoint, timeout=10) as c:
        for op, body in requests:
            if out and out[-1].get("code") in ("unreachable", "not_sent"):
                out.append({"ok": False, "code": "not_sent", "message": "not sent"})
                continue
            try:
                out.append({"ok": True, "body": c.call(op, body)})
            except ClientError as exc:
                out.append({"ok": False, "code": exc.code, "message": exc.message})
else:
    raw = Client(endpoint=endpoint, timeout=10)
    for n, (op, body) in enumerate(requests, 1):
        try:
            reply = json.loads(raw.exchange(protocol.request(op, body, n)))
        except ClientError:
            out.append({"ok": False, "code": "no_reply", "message": "no reply", "id_ok": False})
            break
        err = reply.get("error") or {}
        out.append({"ok": bool(reply.get("ok")), "code": err.get("code"),
                    "message": err.get("message", ""), "id_ok": reply.get("id") == n})
print(json.dumps(out))
"""


def as_user(cluster: Cluster, user: str, requests: list[tuple[str, Any]],
            mode: str = "client") -> list[dict]:
    """Send ``requests`` to schedd over its ipc socket, on one connection, from a process of
    ``user``."""
    res = subprocess.run(
        ["runuser", "-u", user, "--", str(BIN / "python"), "-c", _AS_USER,
         f"ipc://{cluster.home / 'schedd.sock'}", mode],
        input=json.dumps(requests), capture_output=True, text=True, timeout=300, cwd="/tmp",
        env={**cluster.env})
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def job_body(workdir: Path, /, **over: Any) -> dict[str, Any]:
    """The issue's minimal job (in a directory of the test's own: output files of other
    runs' jobs in /tmp, owned by other users, would make it fail)."""
    job = {"script": "#!/bin/sh\nsleep 60\n", "workdir": str(workdir), "time_limit": 5,
           "name": "trust"}
    job.update(over)
    return {"job": job}


def ledger_picture(cluster: Cluster) -> dict[str, str]:
    """What the ledger holds that a request could change: jobs, the queue, associations."""
    pictures = {}
    for key, argv in {"sacct": ("sacct", "-a", "-P", "-n", "-o", "JobID,State"),
                      "squeue": ("squeue", "-h", "-a"),
                      "assoc": ("sacctmgr", "-n", "-P", "show", "assoc")}.items():
        res = cluster.run(*argv)
        assert res.returncode == 0, (argv, res.stderr)
        pictures[key] = res.stdout
    return pictures


def squeue_priority(cluster: Cluster, job_id: int) -> int:
    res = cluster.run("squeue", "-h", "-o", "%Q", "-j", str(job_id))
    assert res.returncode == 0, res.stderr
    return int(res.stdout.strip())


# --- a. the reproduction --------------------------------------------------------------


def test_planted_server_state_is_refused_with_the_field_named(cluster: Cluster,
                                                              other_user: str,
                                                              workdir: Path) -> None:
    """The issue's submission, as the second user through the Python API: refused with
    ``submit.job: unknown field 'extra'``, and no job made."""
    before = ledger_picture(cluster)
    planted = job_body(workdir, name="planted",
                       extra={"admin_priority": PLANTED_PRIORITY, "run_limit": 1_000_000_000})
    refused, after = as_user(cluster, other_user, [("submit", planted), ("ping", {})])
    assert ledger_picture(cluster) == before, "a refused submission left a trace"
    assert refused["ok"] is False, refused
    assert refused["code"] == protocol.E_BAD_REQUEST, refused
    assert refused["message"] == "submit.job: unknown field 'extra'", refused
    assert after["ok"], after  # the connection is still good for the next request


def test_honest_twin_runs_to_its_own_limit_at_the_computed_priority(
        cluster: Cluster, other_user: str, workdir: Path) -> None:
    """The same job without the plant: its priority is the one schedd computed (the same as
    a twin's, below the planted value), and it ends TIMEOUT at its own 5 s limit."""
    # a whole-node job of root's, so that the user's jobs wait (and the cycle ranks them)
    blocker = cluster.sbatch("--exclusive", "--wrap", "sleep 600", cwd=workdir)
    cluster.wait(blocker, {"RUNNING"}, timeout=60)
    try:
        accepted, twin = as_user(cluster, other_user,
                                 [("submit", job_body(workdir, name="honest")),
                                  ("submit", job_body(workdir, name="twin"))])
        assert accepted["ok"] and twin["ok"], (accepted, twin)
        job_id, twin_id = int(accepted["body"]["job_id"]), int(twin["body"]["job_id"])
        job = cluster.job(job_id)
        assert job["state"] == "PENDING"
        assert job["user"] == other_user and job["time_limit"] == 5
        assert job["admin_priority"] is None and job["launched_limit"] is None
        assert "extra" not in job
        until(lambda: cluster.job(job_id)["reason"] in ("Resources", "Priority"),
              "the cycle to rank the job", 30)
        prio = squeue_priority(cluster, job_id)
        assert prio == cluster.job(job_id)["priority"]
        assert 0 < prio < PLANTED_PRIORITY, prio
        assert abs(prio - squeue_priority(cluster, twin_id)) <= 1, "not the computed priority"
        (why,) = as_user(cluster, other_user, [("job_why", {"job_id": str(job_id)})])
        assert why["ok"], why
        factors = why["body"]["factors"].get(str(job_id)) or {}
        if factors:  # the breakdown kiln why shows adds up to it
            assert abs(sum(factors.values()) - prio) <= 1.5, (factors, prio)
        cluster.run("scancel", str(twin_id))
    finally:
        cluster.run("scancel", str(blocker))
    cluster.wait(job_id, {"RUNNING"}, timeout=60)
    ran = cluster.wait(job_id, {"TIMEOUT", "COMPLETED", "FAILED", "CANCELLED"}, timeout=60)
    assert ran["state"] == "TIMEOUT", ran
    assert ran["launched_limit"] == 5, ran
    assert ran["end_time"] - ran["start_time"] >= 4.0, ran  # it ran to its limit (5 s)


# --- b. every op, every field, from a non-admin ------------------------------------------------


def valid_value(spec: Field) -> Any:
    """A value the schema accepts for ``spec`` (the bodies fuzzed are never sent valid)."""
    kind = spec.kind
    if kind == "str":
        return sorted(spec.choices)[-1] if spec.choices else "x"
    if kind == "int":
        return max(int(spec.lo), min(1, int(spec.hi)))
    if kind == "num":
        return max(float(spec.lo), min(1.0, float(spec.hi)))
    if kind == "bool":
        return False
    if kind == "list":
        return []
    if kind == "obj":
        return valid_body(spec.schema or {})
    if kind == "map":
        return {}
    if kind == "tuple":
        return [valid_value(p) for p in spec.parts]
    raise AssertionError(kind)


def valid_body(schema: dict[str, Field]) -> dict[str, Any]:
    return {name: valid_value(spec) for name, spec in schema.items() if spec.required}


def wrong_values(spec: Field) -> list[Any]:
    """Values of the wrong type (or out of range) for ``spec``: a str where an int is needed, a
    list where a str, a dict where a list, a huge int, a bool for an int, null when not
    nullable."""
    kind = spec.kind
    out: list[Any] = []
    if kind == "str":
        out += [7, ["x"], {"x": "y"}]
    elif kind == "int":
        out += ["7", True, 2**80, 1.5]
    elif kind == "num":
        out += ["7", False, 1e300]
    elif kind == "bool":
        out += [1, "true"]
    elif kind == "list":
        out += [{"x": 1}, "x"]
        item = wrong_values(spec.items)[0] if spec.items is not None else None
        out.append([item])
    elif kind == "obj":
        out += [["x"], "x"]
    elif kind == "map":
        out += [["x"], "x"]
        if spec.items is not None:
            out.append({"k": wrong_values(spec.items)[0]})
    elif kind == "tuple":
        out += ["x", [], {"x": 1}]
    if not spec.nullable:
        out.append(None)
    return out


def misspelled(name: str, schema: dict[str, Field]) -> str:
    for candidate in (name[:-1] + name[-1] * 2, name + "s", name.replace("_", "-"),
                      name[::-1]):
        if candidate not in schema and candidate != name:
            return candidate
    raise AssertionError(name)


def fuzz_cases() -> list[tuple[str, dict[str, Any], str, str]]:
    """(op, body, the field path the refusal must name, what was wrong)."""
    cases: list[tuple[str, dict[str, Any], str, str]] = []

    def walk(op: str, schema: dict[str, Field], path: list[str]) -> None:
        where = ".".join([op, *path])

        def body_with(change) -> dict[str, Any]:
            body = valid_body(operations.CLIENT_OPS[op])
            inner = body
            for p in path:
                inner = inner.setdefault(p, {})
            change(inner)
            return body

        cases.append((op, body_with(lambda d: d.update(zz_not_a_field=1)), where,
                      "'zz_not_a_field'"))
        for n, (name, spec) in enumerate(schema.items()):
            if n % 4 == 0:  # a misspelling of every fourth field (all of them: too many)
                wrong = misspelled(name, schema)
                cases.append((op, body_with(lambda d, w=wrong, s=spec: d.update(
                    {w: valid_value(s)})), where, repr(wrong)))
            # two wrong values a field (all of them for every field: too many requests),
            # taken in turn so that every kind of wrong value is sent to every op's fields
            values = wrong_values(spec)
            picked = [values[n % len(values)], values[(n + 1) % len(values)]]
            if None in values and None not in picked:
                picked[1] = None
            for value in picked:
                cases.append((op, body_with(lambda d, k=name, v=value: d.update({k: v})),
                              f"{where}.{name}", "wrong type"))
            if spec.kind == "obj" and spec.schema:
                walk(op, spec.schema, [*path, name])

    for op, schema in operations.CLIENT_OPS.items():
        walk(op, schema, [])
    return cases


def test_every_op_refuses_unknown_misspelled_and_mistyped_fields(cluster: Cluster,
                                                                 other_user: str) -> None:
    cases = fuzz_cases()
    assert len(cases) <= 600, len(cases)  # bounded
    assert {op for op, *_ in cases} == set(operations.CLIENT_OPS)
    before = ledger_picture(cluster)
    replies = as_user(cluster, other_user, [(op, body) for op, body, _, _ in cases], "raw")
    assert len(replies) == len(cases), f"no reply to {cases[len(replies) - 1][:2]}"
    wrong, unmatched = [], 0
    for (op, body, field, what), reply in zip(cases, replies, strict=True):
        message = reply["message"] or ""
        named = message.startswith(f"{field}:") or message.startswith(f"{field}.")
        if what.startswith("'"):
            named = named and what in message
        if reply["ok"] or reply["code"] != protocol.E_BAD_REQUEST or not named \
                or "\n" in message:
            wrong.append((op, json.dumps(body)[:300], field, what, reply))
        unmatched += not reply["id_ok"]
    assert ledger_picture(cluster) == before, "a refused request changed the ledger"
    assert not wrong, f"{len(wrong)} of {len(cases)} not refused as expected: " \
        + "\n".join(map(repr, wrong[:20]))
    # what the Python API sees: a refusal whose id is not the request's is dropped by
    # cli.core.client.Client, which then reports "Unable to contact slurm controller"
    assert unmatched == 0, (f"{unmatched} of {len(cases)} refusals do not carry their "
                            f"request's id (cli.core.client.Client never sees them)")
    # and schedd is still there
    assert as_user(cluster, other_user, [("ping", {})])[0]["ok"]


# --- c. fields that once crashed schedd --------------------------------------------------------

PLANTS = [
    {"nodelist": "node[1-"},  # a broken hostlist
    {"exclude": "node[", "name": "exclude"},
    {"dependency": "afterok:"},
    {"dependency": "afterok:999999999999999999999"},
    {"dependency": "singleton:x,afterany"},
    {"array_spec": "1-", "name": "array"},
    {"array_spec": "0-100000000", "name": "bigarray"},
    {"signal": "NOSUCH@x"},
    {"constraint": "a&|b[", "name": "constraint"},
    {"licenses": "::,:", "name": "licenses"},
    {"gpu_type": "\u00e9\u00e9", "gpus_per_node": 1, "name": "gputype"},
    {"partition": "no-such-partition"},
    {"qos": "no-such-qos"},
    {"account": "no-such-account"},
    {"reservation": "no-such-resv"},
    {"num_nodes": 0, "num_tasks": 0, "cpus_per_task": 0, "name": "zero"},
    {"num_nodes": 2**31, "name": "huge"},
    {"mem_per_node_mb": 2**42, "name": "mem"},
    {"time_limit": 2**31, "time_min": 2**31, "name": "limits"},
    {"nice": -protocol.NICE_LIMIT, "name": "nice"},  # a negative nice is for operators
    {"begin_time": 1e13, "name": "begin"},
    {"environment": {"A": "x" * 1000, "B=C": "d"}, "name": "env"},
    {"stdout": "%%%j%", "stderr": "/nonexistent/%x/%%", "name": "paths"},
    {"workdir": "/nonexistent/dir", "name": "workdir"},
    {"script": "", "name": "empty"},
    {"open_mode": "append", "restart_cost": None, "name": "cost"},
]


def test_fields_that_once_crashed_schedd_leave_it_standing(cluster: Cluster,
                                                           other_user: str,
                                                           workdir: Path) -> None:
    replies = as_user(cluster, other_user, [("submit", job_body(workdir, **p))
                                            for p in PLANTS])
    for plant, reply in zip(PLANTS, replies, strict=True):
        # one line; or Slurm's line and the one that names what does not fit (issue 17)
        lines = (reply.get("message") or "").split("\n")
        assert reply["ok"] or (reply["code"] and lines[0] and (
            len(lines) == 1 or (len(lines) == 2 and lines[0] == NODE_CONFIG))), (plant, reply)
    # refused by a handler's exception caught only by the daemon's last resort (what once
    # took schedd down), not by a check of its own: asserted last, after the rest
    internal = [(plant, reply["message"]) for plant, reply in zip(PLANTS, replies, strict=True)
                if not reply["ok"] and reply["code"] == protocol.E_INTERNAL]
    time.sleep(3)  # a few scheduling cycles over whatever was accepted
    ping = cluster.run("scontrol", "ping")
    assert ping.returncode == 0, ping.stdout + ping.stderr
    queue = cluster.run("squeue", "-h", "-a")
    assert queue.returncode == 0, queue.stderr
    res = cluster.run("scancel", "-u", other_user)
    assert res.returncode == 0, res.stderr
    normal = as_user(cluster, other_user, [("submit", job_body(
        workdir, script="#!/bin/sh\necho fine\n", time_limit=60, name="normal"))])[0]
    assert normal["ok"], normal
    job_id = int(normal["body"]["job_id"])
    done = cluster.wait(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=60)
    assert done["state"] == "COMPLETED", done
    assert (workdir / f"slurm-{job_id}.out").read_text() == "fine\n"
    assert cluster.run("scontrol", "ping").returncode == 0
    assert not internal, f"refused as internal errors, not by a check: {internal}"


def test_a_user_cannot_buy_priority_with_a_negative_nice(cluster: Cluster, other_user: str,
                                                         workdir: Path) -> None:
    """A negative nice is for operators (as in Slurm, and as ``scontrol update`` has it): a
    submission with one, from a non-admin, is refused, or at least ranks no higher than the
    same job without it."""
    blocker = cluster.sbatch("--exclusive", "--wrap", "sleep 600", cwd=workdir)
    cluster.wait(blocker, {"RUNNING"}, timeout=60)
    try:
        nice, honest = as_user(cluster, other_user, [
            ("submit", job_body(workdir, name="nice", nice=-1_000_000)),
            ("submit", job_body(workdir, name="honest"))])
        assert honest["ok"], honest
        if nice["ok"]:
            ids = [int(nice["body"]["job_id"]), int(honest["body"]["job_id"])]
            until(lambda: all(cluster.job(i)["reason"] in ("Resources", "Priority")
                                 for i in ids), "the cycle to rank the jobs", 30)
            prio_nice, prio_honest = (squeue_priority(cluster, i) for i in ids)
            assert prio_nice <= prio_honest, (
                f"a user's nice=-1000000 was accepted and ranks its job at {prio_nice}, "
                f"above the same job without it ({prio_honest})")
        else:
            assert nice["code"] in (protocol.E_PERMISSION, protocol.E_INVALID), nice
    finally:
        cluster.run("scancel", str(blocker))


@pytest.fixture(autouse=True)
def _no_leftovers(cluster: Cluster, other_user: str):
    yield
    cluster.run("scancel", "-u", other_user)
