"""sacct and sreport through the real commands: jobs of every outcome, then their accounting.

One cluster per backend (SQLite, PostgreSQL) with two accounts made by sacctmgr, GPU sampling
every 0.2 s, an H100 price and MinJobAge 1 s (so schedd soon forgets the finished jobs and
sacct must find them in the ledger); the jobs run once for the whole module, all at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentd.sampler import fake_gpu_sample
from schedd.reports.accounting import unit_text
from tests.integration.cluster import Cluster, cleanup, until, world_tempdir
from tests.integration.conftest import BACKENDS
from tests.pgutil import fresh_database

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY"}
H100_PRICE = 2.5
PARSABLE_FORMAT = "JobID,JobName,Account,State,ExitCode,Elapsed,AllocTRES,GPUHours"


class AccountingCluster(Cluster):
    """The standard test cluster plus fast sampling and a GPU price table."""

    def write_config(self, port: int) -> None:
        super().write_config(port)
        conf = self.home / "kiln.toml"
        text = conf.read_text().replace("[agent]\n", "[agent]\nsample_interval = 0.2\n", 1)
        conf.write_text(text + f'[accounting]\ngpu_price = {{ h100 = {H100_PRICE} }}\n'
                               'currency = "USD"\n')


@dataclass
class Jobs:
    since: int  # a POSIX second before the first submission
    workdir: Path
    ok: int
    fail: int
    cancel: int
    timeout: int
    array: int


@pytest.fixture(scope="module", params=BACKENDS)
def acct(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with ExitStack() as stack:
        home = world_tempdir("kiln-acct-")
        stack.callback(cleanup, home)
        url = (stack.enter_context(fresh_database()) if request.param == "postgresql"
               else f"sqlite:///{home}/kiln.db")
        cluster = AccountingCluster(home=home, db_url=url, kill_wait=3, min_job_age=1)
        cluster.up()
        stack.callback(cluster.down)
        for args in (("add", "account", "physics"), ("add", "account", "bio"),
                     ("add", "user", "root", "account=physics"),
                     ("add", "user", "root", "account=bio")):
            res = cluster.run("sacctmgr", "-i", *args)
            assert res.returncode == 0, res.stderr
        yield cluster


@pytest.fixture(scope="module")
def jobs(acct: Cluster) -> Iterator[Jobs]:
    workdir = world_tempdir("kiln-acct-job-")
    since = int(time.time()) - 1
    submit = acct.sbatch
    ok = submit("-A", "physics", "-J", "acct-ok", "--gres=gpu:2", "--wrap",
                "echo $SLURM_JOB_GPUS > ok.gpus; sleep 2", cwd=workdir)
    fail = submit("-A", "bio", "-J", "acct-fail", "--gres=gpu:1", "--wrap", "sleep 1; exit 3",
                  cwd=workdir)
    cancel = submit("-A", "physics", "-J", "acct-cancel", "--gres=gpu:1", "--wrap",
                    "touch cancel.started; sleep 60", cwd=workdir)
    timeout = submit("-A", "bio", "-J", "acct-tmo", "-t", "0:02", "--wrap", "sleep 60",
                     cwd=workdir)
    array = submit("-A", "bio", "-J", "acct-arr", "--array=0-2", "--wrap",
                   "sleep 1; exit $SLURM_ARRAY_TASK_ID", cwd=workdir)
    acct.wait(cancel, {"RUNNING"})
    until(lambda: (workdir / "cancel.started").exists(), "the job to be cancelled runs its script")
    assert acct.run("scancel", str(cancel)).returncode == 0
    wait_ended(acct, [ok, fail, cancel, timeout, array], expect=7)
    yield Jobs(since, workdir, ok, fail, cancel, timeout, array)
    cleanup(workdir)


def wait_ended(cluster: Cluster, ids: list[int], expect: int, timeout: float = 60) -> None:
    """Wait until sacct (the ledger: schedd forgets finished jobs after 1 s) shows ``expect``
    jobs, all ended."""
    deadline = time.time() + timeout
    while True:
        lines = sacct(cluster, "-X", "-P", "-n", "-o", "JobID,State", "-j",
                      ",".join(map(str, ids)))
        states = [line.split("|")[1].split()[0] for line in lines]
        if len(states) == expect and set(states) <= ENDED:
            return
        assert time.time() < deadline, f"jobs not ended after {timeout} s: {lines}"
        time.sleep(0.2)


def sacct(cluster: Cluster, *args: str) -> list[str]:
    res = cluster.run("sacct", *args)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    return res.stdout.splitlines()


def seconds(elapsed: str) -> int:
    days, _, clock = elapsed.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def tres(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


def test_parsable_output_after_every_outcome(acct: Cluster, jobs: Jobs) -> None:
    ids = ",".join(str(j) for j in (jobs.ok, jobs.fail, jobs.cancel, jobs.timeout))
    lines = sacct(acct, "-P", "--format", PARSABLE_FORMAT, "-j", ids)
    assert lines[0] == PARSABLE_FORMAT.replace(",", "|")
    rows = {}
    for line in lines[1:]:
        fields = line.split("|")
        assert len(fields) == 8, line
        rows[fields[0]] = dict(zip(PARSABLE_FORMAT.split(","), fields, strict=True))
    expect = {jobs.ok: ("acct-ok", "physics", "COMPLETED", "0:0"),
              jobs.fail: ("acct-fail", "bio", "FAILED", "3:0"),
              jobs.cancel: ("acct-cancel", "physics", "CANCELLED by 0", "0:0"),
              jobs.timeout: ("acct-tmo", "bio", "TIMEOUT", "0:0")}
    for job_id, (name, account, state, code) in expect.items():
        row = rows[str(job_id)]
        assert (row["JobName"], row["Account"], row["State"], row["ExitCode"]) == \
            (name, account, state, code)
        gpus = int(tres(row["AllocTRES"]).get("gres/gpu", 0))
        assert abs(float(row["GPUHours"]) - gpus * seconds(row["Elapsed"]) / 3600) < 1e-4
        assert rows[f"{job_id}.extern"]["State"] == "COMPLETED"
    assert int(tres(rows[str(jobs.ok)]["AllocTRES"])["gres/gpu"]) == 2
    assert seconds(rows[str(jobs.ok)]["Elapsed"]) >= 2
    assert (rows[f"{jobs.fail}.batch"]["State"], rows[f"{jobs.fail}.batch"]["ExitCode"]) == \
        ("FAILED", "3:0")
    for job_id in (jobs.cancel, jobs.timeout):
        assert (rows[f"{job_id}.batch"]["State"], rows[f"{job_id}.batch"]["ExitCode"]) == \
            ("CANCELLED", "0:15")


def test_fixed_width_and_allocations_only(acct: Cluster, jobs: Jobs) -> None:
    lines = sacct(acct, "-j", str(jobs.cancel))
    assert lines[0] == ("JobID           JobName  Partition    Account  AllocCPUS      State "
                        "ExitCode ")
    assert lines[2].split() == [str(jobs.cancel), "acct-canc+", "gpu", "physics", "1",
                                "CANCELLED+", "0:0"]
    assert [line.split()[0] for line in lines[2:]] == [
        str(jobs.cancel), f"{jobs.cancel}.batch", f"{jobs.cancel}.extern"]
    assert sacct(acct, "-X", "-n", "-P", "-o", "JobID,State", "-j", str(jobs.cancel)) == \
        [f"{jobs.cancel}|CANCELLED by 0"]
    assert sacct(acct, "-n", "-P", "-o", "JobID,State", "-j", f"{jobs.fail}.batch") == \
        [f"{jobs.fail}.batch|FAILED"]


def test_finished_array_by_name(acct: Cluster, jobs: Jobs) -> None:
    lines = sacct(acct, "-X", "--parsable2", "--noheader", "--format=JobIdRaw,State",
                  "--name", "acct-arr")
    raw = {int(line.split("|")[0]): line.split("|")[1] for line in lines}
    assert len(raw) == 3 and jobs.array in raw
    assert sorted(raw.values()) == ["COMPLETED", "FAILED", "FAILED"]
    lines = sacct(acct, "-X", "-P", "-n", "-o", "JobID,JobIDRaw,State,ExitCode", "-j",
                  str(jobs.array))
    by_task = {line.split("|")[0]: line.split("|")[1:] for line in lines}
    assert {k: (v[1], v[2]) for k, v in by_task.items()} == {
        f"{jobs.array}_0": ("COMPLETED", "0:0"), f"{jobs.array}_1": ("FAILED", "1:0"),
        f"{jobs.array}_2": ("FAILED", "2:0")}
    assert {int(v[0]) for v in by_task.values()} == set(raw)
    one = sacct(acct, "-X", "-P", "-n", "-o", "JobID,State", "-j", f"{jobs.array}_1")
    assert one == [f"{jobs.array}_1|FAILED"]


def test_unknown_and_bad_job_ids(acct: Cluster, jobs: Jobs) -> None:
    assert sacct(acct, "-j", "999999") == [
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode ",
        "------------ ---------- ---------- ---------- ---------- ---------- -------- "]
    res = acct.run("sacct", "-j", "abc")
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "sacct: fatal: Bad job/step specified: abc\n")
    res = acct.run("sacct", "-o", "JobID,Foo")
    assert (res.returncode, res.stderr) == (1, 'sacct: error: Invalid field requested: "Foo"\n')


def test_fake_gpu_samples_land_in_sacct(acct: Cluster, jobs: Jobs) -> None:
    indices = [int(i) for i in (jobs.workdir / "ok.gpus").read_text().strip().split(",")]
    assert len(indices) == 2
    readings = [fake_gpu_sample(jobs.ok, i, 81920) for i in indices]
    util = round(sum(u for u, _ in readings) / len(readings), 2)
    memory = int(sum(m for _, m in readings))
    [line] = sacct(acct, "-X", "-P", "-n", "-o", "GPUUtil,GPUMemMax,MaxRSS", "-j", str(jobs.ok))
    gpu_util, gpu_mem, rss = line.split("|")
    # made up on fake GPUs, and labelled so
    assert (gpu_util, gpu_mem) == (f"{util:.1f}%(sim)", unit_text(memory, "MGTP") + "(sim)")
    assert rss[-1] in "KMG" and int(rss[:-1]) > 0


def test_sreport_gpu_usage_per_account_equals_sacct(acct: Cluster, jobs: Jobs) -> None:
    window = (f"start={jobs.since}", "end=now")
    lines = sacct(acct, "-X", "-P", "-n", "-S", str(jobs.since), "-o",
                  "Account,AllocTRES,ElapsedRaw,GPUHours,AllocCPUS")
    gpu_secs: dict[str, int] = {}
    gpu_hours: dict[str, float] = {}
    cpu_secs = 0
    for line in lines:
        account, alloc, elapsed, hours, cpus = line.split("|")
        counts = tres(alloc)
        gpu_secs[account] = gpu_secs.get(account, 0) + int(counts.get("gres/gpu", 0)) * \
            int(elapsed)
        gpu_hours[account] = gpu_hours.get(account, 0.0) + float(hours)
        cpu_secs += int(counts.get("cpu", 0)) * int(elapsed)
    assert set(gpu_secs) == {"physics", "bio"} and all(gpu_secs.values())

    res = acct.run("sreport", "-P", "-n", "-T", "gres/gpu", "-t", "seconds", "cluster",
                   "AccountUtilizationByUser", *window)
    assert res.returncode == 0, res.stderr
    reported = {f[1]: int(f[5]) for f in (line.split("|") for line in res.stdout.splitlines())
                if f[2] == ""}
    assert reported == {"root": sum(gpu_secs.values()), **gpu_secs}

    res = acct.run("sreport", "-P", "-n", "cluster", "AccountCost", *window)
    assert res.returncode == 0, res.stderr
    cost = {f[1]: f for f in (line.split("|") for line in res.stdout.splitlines())}
    for account, hours in gpu_hours.items():
        _, _, gtype, billed_hours, price, total = cost[account]
        assert gtype == "h100" and float(price) == H100_PRICE
        assert abs(float(billed_hours) - gpu_secs[account] / 3600) < 1e-4
        assert abs(float(billed_hours) - hours) < 1e-4 * len(lines)
        assert abs(float(total) - float(billed_hours) * H100_PRICE) < 0.01

    res = acct.run("sreport", "-P", "-n", "-t", "seconds", "cluster", "utilization", *window)
    assert res.returncode == 0, res.stderr
    name, allocated, down, pdown, idle, planned, total = res.stdout.strip().split("|")
    assert int(allocated) == cpu_secs
    assert int(allocated) + int(down) + int(pdown) + int(idle) + int(planned) == int(total)


def test_sreport_top_usage_and_errors(acct: Cluster, jobs: Jobs) -> None:
    res = acct.run("sreport", "user", "TopUsage", f"start={jobs.since}", "end=now", "-T",
                   "gres/gpu", "-t", "seconds", "-P")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[1].startswith("Top 10 Users ") and lines[2] == "Usage reported in TRES Seconds"
    assert lines[4] == "Cluster|Login|Proper Name|Account|TRES Name|Used"
    rows = [line.split("|") for line in lines[5:]]
    assert [(r[1], r[3]) for r in rows] == [("root", "physics"), ("root", "bio")]
    assert int(rows[0][5]) > int(rows[1][5]) > 0
    res = acct.run("sreport", "cluster", "foo")
    assert res.returncode == 1 and res.stderr.startswith("Not valid report foo\n")


def test_state_filter_within_a_window(acct: Cluster, jobs: Jobs) -> None:
    lines = sacct(acct, "-X", "-P", "-n", "-o", "JobIDRaw,State", "-S", str(jobs.since),
                  "-s", "CD,F,CA,TO")
    assert {int(line.split("|")[0]) for line in lines} >= {jobs.ok, jobs.fail, jobs.cancel,
                                                           jobs.timeout}


def test_users_see_their_own_jobs_unless_they_ask(acct: Cluster, jobs: Jobs,
                                                  other_user: str) -> None:
    res = acct.run("sacct", "-X", "-n", "-P", "-o", "JobIDRaw", "-S", str(jobs.since),
                   user=other_user)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    res = acct.run("sacct", "-X", "-n", "-P", "-a", "-o", "JobIDRaw,User", "-S",
                   str(jobs.since), user=other_user)
    assert res.returncode == 0, res.stderr
    assert f"{jobs.ok}|root" in res.stdout.splitlines()


def test_sacct_reads_the_ledger_after_schedd_forgets_the_jobs(acct: Cluster, jobs: Jobs) -> None:
    deadline = time.time() + 60  # MinJobAge 1 s; schedd purges its memory every 5 s
    while acct.run("squeue", "-h", "-j", str(jobs.fail)).returncode == 0:
        assert time.time() < deadline, "schedd never forgot the finished job"
        time.sleep(0.2)
    assert sacct(acct, "-X", "-P", "-n", "-o", "JobID,State,ExitCode", "-j", str(jobs.fail)) == \
        [f"{jobs.fail}|FAILED|3:0"]
