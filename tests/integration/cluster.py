"""A real kiln cluster for a test: schedd and agents as processes, in a temp ``KILN_HOME``.

It is brought up the way a user does it (``kiln up``, after writing a kiln.toml with test
settings) and driven through the real commands (``sbatch``, ``squeue``, ...), whose output and
exit codes the tests look at. A second Unix user, made for the session, stands for "someone
else" in the permission tests.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

BIN = Path(sys.executable).parent
CLI_TIMEOUT = 60


@dataclass
class Cluster:
    home: Path
    db_url: str
    nodes: int = 1
    fake_gpus: str = "8xH100-80GB"
    cpus: int = 0  # CPUs each node offers (kiln up --cpus); 0 = kiln up's default
    kill_wait: int = 30
    extra_env: dict[str, str] = field(default_factory=dict)
    min_job_age: int = 300  # MinJobAge, seconds
    metrics_port: int = 0  # schedd's Prometheus endpoint on 127.0.0.1; 0 = off
    node_timeout: float = 30.0  # SlurmdTimeout, seconds
    allow_root_jobs: bool = True
    agent_host: str = "127.0.0.1"  # where schedd listens for agents (a veth address in netns)
    schedd_extra: str = ""  # more lines for the [schedd] table (HA peers, ...)
    scheduler_extra: str = ""  # more lines for the [scheduler] table (forecast_interval, ...)
    preempt_exempt_time: int = 0  # PreemptExemptTime: tests preempt jobs that just started
    socket_subdir: bool = False  # the commands' socket in KILN_HOME/sock/, not KILN_HOME
    agent_extra: str = ""  # more lines for the [agent] table (fake GPU affinity, ...)
    # a private /tmp per job (agentd/jobtmp.py): off, since the tests' homes and working
    # directories are under /tmp, which a job with its own /tmp cannot reach (test_job_tmp.py
    # turns it on, with both outside /tmp)
    job_tmp: bool = False
    config_extra: str = ""  # more tables at the end of kiln.toml (a [[partition]], ...)
    up_args: list[str] = field(default_factory=list)  # more `kiln up` options
    # what the daemons may log and do without failing the test (expect_log, expect_exit)
    allowed_logs: list[re.Pattern[str]] = field(default_factory=list)
    expected_exits: set[str] = field(default_factory=set)
    _log_offsets: dict[str, int] = field(default_factory=dict, repr=False)
    _pids: dict[str, int] = field(default_factory=dict, repr=False)

    live: ClassVar[list[Cluster]] = []  # up and not yet down: checked after each test

    # --- the daemons' health: their logs and their exits fail the test (conftest.py) ----------

    def expect_log(self, pattern: str) -> None:
        """A test that provokes a daemon error on purpose: a log record (or a block of a
        daemon's stderr) matching ``pattern`` (a regex, searched) no longer fails it, for the
        rest of this cluster's life."""
        self.allowed_logs.append(re.compile(pattern, re.DOTALL))

    def expect_exit(self, daemon: str) -> None:
        """A test that stops or kills a daemon on purpose (``schedd``, ``agentd-node1``): its
        exit, and the missing clean-stop line, do not fail it."""
        self.expected_exits.add(daemon)

    def log_problems(self) -> list[str]:
        """What the daemons logged since the last look that no test expected: a traceback, an
        ``internal`` error (a handler that raised), anything on a daemon's stderr that looks
        like a crash. Each problem is the whole record, so the message says what broke."""
        problems = []
        for path in sorted((self.home / "log").glob("*")):
            if path.suffix not in (".log", ".out") or not path.is_file():
                continue
            start = self._log_offsets.get(path.name, 0)
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read()
            cut = data.rfind(b"\n") + 1  # a record still being written waits for next time
            self._log_offsets[path.name] = start + cut
            for record in _records(data[:cut].decode(errors="replace")):
                if not _is_problem(record):
                    continue
                if any(p.search(record) for p in self.allowed_logs):
                    continue
                problems.append(f"{path.name}: {record.rstrip()[-2000:]}")
        return problems

    def check_logs(self) -> None:
        problems = self.log_problems()
        if problems:
            raise AssertionError(f"daemon log(s) in {self.home}/log hold errors no test "
                                 "expected (Cluster.expect_log allows one):\n"
                                 + "\n---\n".join(problems))

    def _daemon_pids(self) -> dict[str, int]:
        pids = {}
        for pid_file in (self.home / "run").glob("*.pid"):
            try:
                pids[pid_file.stem] = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
        return pids

    @property
    def socket(self) -> str:
        """The path of the commands' socket on the head node (schedd's)."""
        return f"{self.home}/sock/schedd.sock" if self.socket_subdir else \
            f"{self.home}/schedd.sock"

    def write_config(self, port: int) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        os.chmod(self.home, 0o755)
        if self.socket_subdir:
            os.makedirs(self.home / "sock", mode=0o755, exist_ok=True)
        (self.home / "kiln.toml").write_text(
            f"""cluster_name = "kiln"
[schedd]
db_url = "{self.db_url}"
client_endpoint = "ipc://{self.socket}"
agent_endpoint = "tcp://{self.agent_host}:{port}"
kill_wait = {self.kill_wait}
min_job_age = {self.min_job_age}
{f'metrics_listen = "127.0.0.1:{self.metrics_port}"' if self.metrics_port else ""}
heartbeat_interval = 1.0
node_timeout = {self.node_timeout}
allow_root_jobs = {str(self.allow_root_jobs).lower()}
curve = true
{self.schedd_extra}
[scheduler]
interval = 0.5
preempt_exempt_time = {self.preempt_exempt_time}
{self.scheduler_extra}
[agent]
fake_gpus = "{self.fake_gpus}"
job_tmp = {str(self.job_tmp).lower()}
{self.agent_extra}
[[partition]]
name = "gpu"
default = true
[[partition]]
name = "short"
max_time = 3600
{self.config_extra}
"""
        )

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(self.extra_env)
        env["KILN_HOME"] = str(self.home)
        env.pop("KILN_CONF", None)
        env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def up(self) -> subprocess.CompletedProcess[str]:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.write_config(port)
        res = self.run("kiln", "up", "--nodes", str(self.nodes), "--fake-gpus", self.fake_gpus,
                       *(["--cpus", str(self.cpus)] if self.cpus else []), *self.up_args)
        assert res.returncode == 0, res.stderr + res.stdout
        if self not in Cluster.live:
            Cluster.live.append(self)
        return res

    def down(self) -> None:
        """Cancel every job and ``kiln down``; then fail if a daemon had died before (and no
        test expected it), did not stop cleanly on SIGTERM (its clean-stop line, logged only
        when its main returns 0, is missing), or logged an error no test expected."""
        if self in Cluster.live:
            Cluster.live.remove(self)
        before = self._daemon_pids()
        dead = [f"{name} (pid {pid}) had exited before teardown (SIGKILL, a crash)"
                for name, pid in sorted(before.items())
                if not _alive(pid) and name not in self.expected_exits]
        self.run("scancel", "-u", "root")
        for user in _made_users:
            self.run("scancel", "-u", user)
        self.run("kiln", "down")
        unclean = []
        for name, pid in sorted(before.items()):
            if (name in self.expected_exits or any(name in d for d in dead)
                    or not (self.home / "log" / f"{name}.log").exists()):
                continue
            log_text = (self.home / "log" / f"{name}.log").read_text(errors="replace")
            if f"stopped (pid {pid})" not in log_text:
                unclean.append(f"{name} (pid {pid}) did not stop cleanly (exit status 0 on "
                               "SIGTERM): no clean-stop line in its log")
        problems = dead + unclean + self.log_problems()
        if problems:
            raise AssertionError(f"the cluster in {self.home} ended badly:\n"
                                 + "\n---\n".join(problems))

    def run(self, *args: str, user: str | None = None, input: str | None = None,
            cwd: str | Path | None = None, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
        """Run one of kiln's commands (as ``user`` when given) and capture what it printed."""
        full_env = {**self.env, **(env or {})}
        argv = [str(BIN / args[0]), *args[1:]]
        if user is not None:
            argv = ["runuser", "-u", user, "--", "env", f"--chdir={cwd or '/tmp'}",
                    f"KILN_HOME={self.home}", f"PATH={full_env['PATH']}", *argv]
        return subprocess.run(argv, input=input, capture_output=True, text=True,
                              env=full_env, cwd=str(cwd) if cwd else None, timeout=CLI_TIMEOUT)

    def ok(self, *args: str) -> str:
        """``run`` of a command that must succeed: what it printed on stdout."""
        res = self.run(*args)
        assert res.returncode == 0, f"{args}: {res.stderr}"
        return res.stdout

    def sbatch(self, *args: str, user: str | None = None, input: str | None = None,
               cwd: str | Path | None = None) -> int:
        res = self.run("sbatch", "--parsable", *args, user=user, input=input, cwd=cwd)
        assert res.returncode == 0, f"sbatch failed: {res.stderr}"
        return int(res.stdout.strip().split(";")[0])

    def job(self, job_id: int | str) -> dict[str, Any]:
        """The job as schedd's wire reports it (the data behind squeue/scontrol)."""
        from cli.core.client import Client

        with Client(endpoint=f"ipc://{self.socket}", timeout=10) as client:
            jobs = client.call("query_jobs", {"job_ids": [str(job_id)]})["jobs"]
        return jobs[0]

    def wait(self, job_id: int | str, states: set[str], timeout: float = 60) -> dict[str, Any]:
        deadline = time.time() + timeout
        job: dict[str, Any] = {}
        while time.time() < deadline:
            job = self.job(job_id)
            if job["state"] in states:
                return job
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} is {job.get('state')} ({job.get('reason')}), "
                             f"not {states}, after {timeout} s")

    def scontrol_show_job(self, job_id: int) -> dict[str, str]:
        res = self.run("scontrol", "show", "job", str(job_id))
        assert res.returncode == 0, res.stderr
        return dict(re.findall(r"(\w[\w/:]*)=(\S*)", res.stdout))


_RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", re.M)


def _records(text: str) -> list[str]:
    """A log split into records (a line with logging's timestamp and what follows it up to the
    next; a traceback belongs to the record that logged it); text before the first record (a
    daemon's stderr) is one record."""
    starts = [m.start() for m in _RECORD_START.finditer(text)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)], strict=True)
            if text[a:b].strip()]


def _is_problem(record: str) -> bool:
    return ("Traceback (most recent call last)" in record or "internal error" in record
            or " CRITICAL " in record or "Fatal Python error" in record)


def until(check: Any, what: str = "", timeout: float = 60) -> Any:
    """Poll ``check()`` until it returns something true, and return that. The timeout only
    bounds a hang: the test waits on the condition, never on a duration. ``what`` names the
    condition in the failure (by default, the check's own name)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened, in {timeout} s: {what or _name(check)}")
        time.sleep(0.1)



_RAW_CLIENT = r"""
import json, sys
from cli.core.client import Client
from kiln.wire import protocol
client = Client(endpoint=sys.argv[1], timeout=10)
out = []
for n, line in enumerate(sys.stdin):
    op, body = json.loads(line)
    out.append(json.loads(client.exchange(protocol.request(op, body, n + 1))))
print(json.dumps(out))
"""


def raw_requests(cluster: Cluster, user: str, requests: list[tuple[str, dict]]) -> list[dict]:
    """Requests over the local socket as ``user`` from a bare client (no command's checks or
    filtering): what an attacker's own program can send. Each reply whole, in order."""
    res = subprocess.run(
        ["runuser", "-u", user, "--", str(BIN / "python"), "-c", _RAW_CLIENT,
         f"ipc://{cluster.home}/schedd.sock"],
        input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True, text=True,
        timeout=60, cwd="/tmp")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def stop_process(proc: subprocess.Popen) -> None:
    """Kill a process a test started (an agent in a namespace, a second schedd) and reap it."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)

def _name(check: Any) -> str:
    return getattr(check, "__qualname__", repr(check))


def release_file(workdir: Path, name: str = "release") -> str:
    """A job script's line that waits until the test creates ``workdir/name``: a job that
    runs exactly as long as the test needs, whatever the machine's load."""
    return f"while [ ! -e {workdir / name} ]; do sleep 0.1; done"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def pid_exists(pid: int) -> bool:
    """Whether a process of that pid exists (a zombie too): ``kill(pid, 0)``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def node_state(cluster: Cluster, node: str) -> str:
    """The node's state as ``sinfo -N -o '%N %T'`` prints it, lower case ('' if not listed)."""
    for line in cluster.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.splitlines():
        name, _, state = line.strip().partition(" ")
        if name == node:
            return state.strip().lower()
    return ""


_made_users: list[str] = []


def make_user() -> str:
    """A throwaway Unix user with a home directory (removed at session end)."""
    name = f"kilnt{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True,
                   capture_output=True)
    _made_users.append(name)
    return name


def remove_users() -> None:
    for name in _made_users:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        subprocess.run(["userdel", "--remove", name], capture_output=True)
    _made_users.clear()


def user_home(name: str) -> Path:
    return Path(pwd.getpwnam(name).pw_dir)


@contextmanager
def sqlite_cluster(home: Path, **kw: Any) -> Iterator[Cluster]:
    """A cluster up in ``home`` on a SQLite ledger there, for a module's own fixture (one
    with a config of its own); down when the block ends. ``home`` stays the caller's."""
    cluster = Cluster(home=home, db_url=f"sqlite:///{home}/kiln.db", **kw)
    cluster.up()
    try:
        yield cluster
    finally:
        cluster.down()


def world_tempdir(prefix: str, under: str = "/tmp") -> Path:
    """A temp dir other users can reach (pytest's own tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=under))
    os.chmod(path, 0o755)
    return path


def cleanup(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)
