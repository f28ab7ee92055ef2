"""Per-job cgroups (agentd/cgroups.py) on the real kernel, and v2 against a fake cgroupfs tree.

The real tests run jobs through the launcher as a throwaway user, on whatever this host has
(here: v1 memory, cpuset, devices, pids, freezer writable as root, and a v2 mount without
controllers used for membership and cgroup.kill); each also runs with the v1 freezer alone
doing the kill where that matters. Each test's agent has a node name of its own, so its
cgroups (kiln/<node>/job_<id>_<gen>) never meet another's. Waits poll conditions with a
generous deadline; asserts are about outcomes (states, what survives, what a job can open).
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from agentd import cgroupfs
from agentd import cgroups as cg_mod
from agentd.cgroups import Cgroups, Layout, Limits, Settings
from agentd.launcher import Launcher
from agentd.step_tasks import StepRunner
from cli.scontrol import node_lines
from schedd.handlers import agent as agent_handlers
from tests.unit.agentd.launching import output, spec, wait_for, wait_until

_HOST = cg_mod.detect()


def _writable() -> bool:
    if os.geteuid() != 0 or not {"memory", "cpuset", "devices", "pids", "freezer"} <= \
            set(_HOST.v1):
        return False
    probe = Cgroups(f"probe{secrets.token_hex(2)}", layout=_HOST)
    probe.close()
    return probe.active


_WRITABLE = _writable()
real = pytest.mark.skipif(
    not _WRITABLE,
    reason="needs root and writable cgroup v1 controllers, not available here (a cgroup "
           "v2-only host, as stock Debian 12 and Ubuntu 22.04+); the v2 code is covered by "
           "this file's fake v2 tree tests")


# --- a fake v2 tree --------------------------------------------------------------------------


def _fake_v2(tmp: Path) -> tuple[Path, str]:
    """A cgroupfs-like directory tree with every controller, and a mountinfo naming it."""
    root = tmp / "cg"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("")
    (root / "cpuset.cpus.effective").write_text("0-7\n")
    mountinfo = tmp / "mountinfo"
    mountinfo.write_text(f"30 25 0:26 / {root} rw,nosuid - cgroup2 cgroup2 rw\n"
                         f"31 25 0:27 / /proc rw - proc proc rw\n")
    return root, str(mountinfo)


def _fake_files(where: Path) -> None:
    """What the kernel would show in a new v2 cgroup."""
    for name, text in {"cgroup.controllers": "", "memory.max": "max", "memory.swap.max": "max", "pids.max": "max",
                       "cpuset.cpus": "", "cgroup.kill": "", "cgroup.procs": "",
                       "cgroup.events": "populated 0\n", "memory.events": "oom_kill 0\n",
                       "memory.peak": "0", "cgroup.subtree_control": "",
                       "cpuset.cpus.effective":
                           (where.parent / "cpuset.cpus.effective").read_text()}.items():
        if not (where / name).exists():
            (where / name).write_text(text)


@pytest.fixture
def fake_kernel(monkeypatch):
    """A new directory of the fake tree gets the files the kernel would put in a cgroup
    (``os.mkdir``, which ``Path.mkdir`` calls too)."""
    real_mkdir = os.mkdir

    def mkdir(path, *a, **k):
        real_mkdir(path, *a, **k)
        where = Path(path)
        if (where.parent / "cgroup.controllers").exists():
            _fake_files(where)

    monkeypatch.setattr(os, "mkdir", mkdir)


def test_v2_detected_and_limits_written_with_slurms_meaning(tmp_path, fake_kernel):
    root, mountinfo = _fake_v2(tmp_path)
    settings = Settings(root=str(root), allowed_ram_space=50, pids_max=64,
                        device_dir=str(tmp_path / "nodev"))
    cgroups = Cgroups("n1", settings, mountinfo=mountinfo)
    assert cgroups.layout.version == "v2"
    assert cgroups.node_cpus == tuple(range(8))
    assert (root / "cgroup.subtree_control").read_text() == "+memory +cpuset +pids"
    assert (root / "kiln" / "n1" / "cgroup.subtree_control").read_text() == \
        "+memory +cpuset +pids"
    limits = cgroups.limits((5, 1), cpus=3, memory_mb=200, gpus=[])
    assert limits == Limits(100 * 1024 * 1024, (0, 1, 2), (), 64, no_swap=True)
    job = cgroups.create(5, 1, limits)
    where = root / "kiln" / "n1" / "job_5_1"
    assert (where / "memory.max").read_text() == str(100 * 1024 * 1024)
    assert (where / "memory.swap.max").read_text() == "0"  # ConstrainSwapSpace
    assert (where / "pids.max").read_text() == "64"
    assert (where / "cpuset.cpus").read_text() == "0-2"
    assert job.procs_paths() == [str(where / "batch" / "cgroup.procs")]
    # a second job gets the CPUs the first does not hold
    assert cgroups.limits((6, 1), cpus=3, memory_mb=0, gpus=[]).cpus == (3, 4, 5)
    (where / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    assert job.populated()
    job.kill()
    assert (where / "cgroup.kill").read_text() == "1"
    (where / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert job.oom_kills() == 1
    assert "not enforced" not in cgroups.summary()


def test_v2_devices_are_said_to_be_unenforced(tmp_path):
    root, mountinfo = _fake_v2(tmp_path)
    devs = tmp_path / "dev"
    devs.mkdir()
    if os.geteuid() == 0:
        os.mknod(devs / "nvidia0", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    cgroups = Cgroups("n2", Settings(root=str(root), device_dir=str(devs)), mountinfo=mountinfo)
    if os.geteuid() == 0:
        assert "devices (no writable devices controller)" in cgroups.summary()


def test_no_hierarchy_is_said_once_and_the_launcher_runs_without(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("31 25 0:27 / /proc rw - proc proc rw\n")
    cgroups = Cgroups("n3", Settings(root=str(tmp_path / "none")), mountinfo=str(mountinfo))
    assert not cgroups.active
    assert cgroups.summary().startswith("cgroups: none writable; ")
    launcher = Launcher(tmp_path / "spool", "n3", cgroups=cgroups)
    assert launcher.cgroups is None
    launcher.close()


def test_cpu_lists_round_trip():
    assert cg_mod.parse_cpu_list("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert cg_mod.format_cpu_list((5, 0, 1, 2, 7)) == "0-2,5,7"


# --- the real kernel -------------------------------------------------------------------------


@pytest.fixture(params=["host", "v1-only"])
def cgroups(request):
    """This host's hierarchies, or only its v1 ones (the freezer does the kill then)."""
    layout = _HOST if request.param == "host" else Layout(v1=dict(_HOST.v1))
    made = Cgroups(f"t{secrets.token_hex(3)}", Settings(pids_max=256), layout=layout)
    yield made
    made.close()
    assert not any(where.exists() for where in made.dirs.values()), "cgroups left behind"


@pytest.fixture
def contained(base, cgroups):
    lau = Launcher(base / "spool", cgroups.node, kill_wait=2, cgroups=cgroups)
    yield lau
    for job in list(lau._jobs.values()):  # a failed test must not leave sleepers behind
        if job.cgroup is not None:
            job.cgroup.kill()
    wait_until(lambda: not lau.poll() and not lau.running(), "jobs reaped")
    lau.close()


def sleepers(who, seconds: int) -> list[psutil.Process]:
    """The user's live ``sleep <seconds>`` processes."""
    out = []
    for proc in psutil.process_iter(["uids", "cmdline", "status"]):
        info = proc.info
        if info["uids"] and info["uids"].real == who.uid and \
                info["cmdline"] == ["sleep", str(seconds)] and \
                info["status"] != psutil.STATUS_ZOMBIE:
            out.append(proc)
    return out


ESCAPER = """#!/bin/bash
setsid sleep {secs} &
( nohup sleep {secs} >/dev/null 2>&1 & ) &
echo started
{rest}
"""


@real
def test_a_setsid_child_of_a_finished_job_is_killed(contained, base, user):
    contained.launch(spec(user, base, 1, ESCAPER.format(secs=1001, rest="exit 0")))
    wait_until(lambda: "started" in output(base, 1), "job started")
    assert wait_for(contained, 1).state == "COMPLETED"
    assert sleepers(user, 1001) == []


@real
def test_cancel_and_timeout_leave_no_escaped_process(contained, base, user):
    contained.launch(spec(user, base, 2, ESCAPER.format(secs=1002, rest="sleep 600")))
    contained.launch(spec(user, base, 3, ESCAPER.format(secs=1003, rest="sleep 600"),
                          time_limit=2))
    wait_until(lambda: "started" in output(base, 2) and "started" in output(base, 3),
               "jobs started")
    wait_until(lambda: len(sleepers(user, 1002)) == 2, "escapers running")
    contained.terminate(2, 1)
    assert wait_for(contained, 2).state == "CANCELLED"
    assert wait_for(contained, 3).state == "TIMEOUT"
    assert sleepers(user, 1002) == [] and sleepers(user, 1003) == []


@real
def test_adopted_job_is_still_held_by_its_cgroup(base, user, cgroups):
    first = Launcher(base / "spool", cgroups.node, kill_wait=2, cgroups=cgroups)
    first.launch(spec(user, base, 4, ESCAPER.format(secs=1004, rest="sleep 600")))
    wait_until(lambda: len(sleepers(user, 1004)) == 2, "escapers running")
    second = Launcher(base / "spool", cgroups.node, kill_wait=2, cgroups=cgroups)
    assert second.recover() == []
    second.terminate(4, 1)
    assert wait_for(second, 4).state == "CANCELLED"
    assert sleepers(user, 1004) == []
    first.poll()  # reaps the old agent's child; the job is not its to report any more
    for lau in (first, second):
        lau.close()


HOG = """#!/bin/bash
python3 -c 'b = b"x" * (200 * 1024 * 1024); print("survived")'
echo "script goes on"
"""


@real
def test_twice_its_memory_is_out_of_memory_and_the_node_runs_the_next(contained, base, user):
    contained.launch(spec(user, base, 5, HOG, memory_mb=100))
    done = wait_for(contained, 5)
    assert done.state == "OUT_OF_MEMORY"
    text = output(base, 5)
    assert "survived" not in text.splitlines() and "script goes on" in text.splitlines()
    assert "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=5.batch. Some of your " \
           "processes may have been killed by the cgroup out-of-memory handler." in text
    assert done.max_rss_kb > 50 * 1024  # the cgroup's own peak
    contained.launch(spec(user, base, 6, "#!/bin/sh\necho fine\n", memory_mb=100))
    assert wait_for(contained, 6).state == "COMPLETED"
    assert output(base, 6) == "fine\n"


AFFINITY = """#!/bin/bash
python3 -c 'import os; print(sorted(os.sched_getaffinity(0)))'
grep Cpus_allowed_list /proc/self/status
sleep 600
"""


@real
def test_a_jobs_cpuset_is_exactly_its_cpus(contained, base, user, cgroups):
    if len(cgroups.node_cpus) < 2:
        pytest.skip("needs two CPUs")
    contained.launch(spec(user, base, 7, AFFINITY, cpus=1))
    contained.launch(spec(user, base, 8, AFFINITY, cpus=1))
    wait_until(lambda: "Cpus_allowed" in output(base, 7) and
               "Cpus_allowed" in output(base, 8), "jobs printed their CPUs")
    held = {key[0]: cpus for key, cpus in cgroups.cpus_in_use.items()}
    assert held[7] != held[8] and len(held[7]) == len(held[8]) == 1
    for job in (7, 8):
        text = output(base, job)
        assert f"[{held[job][0]}]" in text
        assert f"Cpus_allowed_list:\t{held[job][0]}" in text
    for job in (7, 8):
        contained.terminate(job, 1)
        assert wait_for(contained, job).state == "CANCELLED"
    assert cgroups.cpus_in_use == {}


OPENER = """#!/usr/bin/env python3
import os
for n in (0, 1):
    try:
        os.close(os.open("{dev}/nvidia%d" % n, os.O_RDONLY))
        print(n, "opened")
    except OSError as exc:
        print(n, exc.strerror)
"""


@real
def test_only_the_jobs_stand_in_gpu_can_be_opened(base, user, cgroups):
    dev = base / "out" / "dev"
    dev.mkdir()
    for n, minor in ((0, 7), (1, 8)):  # stand-ins: /dev/full's and /dev/random's numbers
        os.mknod(dev / f"nvidia{n}", 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        os.chmod(dev / f"nvidia{n}", 0o666)
    with_gpus = Cgroups(cgroups.node, replace(cgroups.settings, device_dir=str(dev)),
                        layout=cgroups.layout)
    lau = Launcher(base / "spool", cgroups.node, kill_wait=2, cgroups=with_gpus)
    lau.launch(spec(user, base, 9, OPENER.format(dev=dev), gpus=[0]))
    lau.launch(spec(user, base, 10, OPENER.format(dev=dev), gpus=[1]))
    assert wait_for(lau, 9).state == "COMPLETED" and wait_for(lau, 10).state == "COMPLETED"
    assert output(base, 9) == "0 opened\n1 Operation not permitted\n"
    assert output(base, 10) == "0 Operation not permitted\n1 opened\n"
    lau.close()
    with_gpus.close()


@real
def test_v2_alone_holds_the_processes_and_the_stand_in_gpus(base, user):
    """This host's v2 mount only (no controllers): membership, cgroup.kill and a device
    program, for real."""
    dev = base / "out" / "dev"
    dev.mkdir()
    for n, minor in ((0, 7), (1, 8)):
        os.mknod(dev / f"nvidia{n}", 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        os.chmod(dev / f"nvidia{n}", 0o666)
    v2 = Cgroups(f"t{secrets.token_hex(3)}", Settings(device_dir=str(dev)),
                 layout=Layout(v2=_HOST.v2, v2_controllers=_HOST.v2_controllers))
    assert v2.layout.version == "v2" and set(v2.dirs) == {"unified"} and v2.device_program
    lau = Launcher(base / "spool", v2.node, kill_wait=2, cgroups=v2)
    lau.launch(spec(user, base, 15, OPENER.format(dev=dev), gpus=[1]))
    lau.launch(spec(user, base, 16, ESCAPER.format(secs=1016, rest="exit 0")))
    assert wait_for(lau, 15).state == "COMPLETED"
    assert output(base, 15) == "0 Operation not permitted\n1 opened\n"
    assert wait_for(lau, 16).state == "COMPLETED"
    assert sleepers(user, 1016) == []
    lau.close()
    v2.close()
    assert not any(where.exists() for where in v2.dirs.values())


def test_the_device_program_refuses_exactly_the_listed_devices():
    code = cg_mod.device_program([("c", 195, 1)])
    assert len(code) == 8 * (4 + 5 + 2)  # loads, one device's test, the final allow
    assert code[-16:] == cg_mod._insn(0xB7, 0, imm=1) + cg_mod._insn(0x95)


FORKER = """#!/usr/bin/env python3
import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        n += 1
except OSError as exc:
    print("fork failed after", n, exc.strerror)
"""


@real
def test_pids_max_holds_a_fork_loop(contained, base, user):
    contained.launch(spec(user, base, 11, FORKER))
    assert wait_for(contained, 11).state == "COMPLETED"
    text = output(base, 11)
    assert text.startswith("fork failed after ") and "Resource temporarily unavailable" in text
    assert int(text.split()[3]) < 256


# --- srun's step tasks -----------------------------------------------------------------------


def step_spec(who, base: Path, job_id: int, argv: list[str]) -> dict:
    out = base / "out"
    return {"job_id": job_id, "step_id": 0, "user": who.name, "uid": who.uid, "gid": who.gid,
            "argv": argv, "cwd": str(out), "environment": {"PATH": "/usr/bin:/bin"},
            "tasks": [{"procid": 0, "stdout": str(out / f"step-{job_id}.out"),
                       "stderr": str(out / f"step-{job_id}.err")}],
            "time_limit": None, "job_start": time.time(), "kill_wait": 1}


def step_report(runner: StepRunner) -> dict:
    return step_reports(runner, 1)[0]


def step_reports(runner: StepRunner, count: int) -> list[dict]:
    found: list[dict] = []

    def due() -> bool:
        for key, body in runner.poll():
            runner.acknowledged(key)
            found.append(body)
        return len(found) >= count

    wait_until(due, "step_ended")
    return found


@real
def test_step_tasks_join_their_jobs_cgroup_and_leave_nothing(contained, base, user, cgroups):
    runner = StepRunner(contained, cgroups.node)
    contained.launch(spec(user, base, 12, "#!/bin/sh\nsleep 600\n"))
    script = "grep -E '^[0-9]+:(memory|freezer):' /proc/self/cgroup; setsid sleep 1012 &"
    runner.launch(step_spec(user, base, 12, ["bash", "-c", script]))
    assert step_report(runner)["state"] == "COMPLETED"
    text = (base / "out" / "step-12.out").read_text()
    assert f"/kiln/{cgroups.node}/job_12_1/step_0\n" in text
    assert sleepers(user, 1012) == []
    runner.launch(step_spec(user, base, 13, ["bash", "-c", script.replace("1012", "1013")]))
    assert step_report(runner)["state"] == "COMPLETED"  # no batch job of it here: its own
    assert f"/kiln/{cgroups.node}/job_13_steps_from_0/step_0\n" in \
        (base / "out" / "step-13.out").read_text()
    assert sleepers(user, 1013) == []
    contained.terminate(12, 1)
    assert wait_for(contained, 12).state == "CANCELLED"
    runner.close()


STEP_HOLDS = "grep Cpus_allowed_list /proc/self/status; while [ ! -e {release} ]; do sleep 0.1; done"


@real
def test_steps_where_the_batch_job_is_not_get_what_the_job_holds_there(contained, base, user,
                                                                      cgroups):
    """srun's tasks on a node of the job where its batch script does not run: their cgroup
    there is the job's, made from what it holds there (the launch's ``allocation``), as on the
    batch host: its CPU ids the cpuset, its memory the limit; the job's steps share it, and it
    goes with the last of them."""
    if len(cgroups.node_cpus) < 2:
        pytest.skip("needs two CPUs")
    runner = StepRunner(contained, cgroups.node)
    release = base / "out" / "release"
    holding = {"cpus": 1, "memory_mb": 64, "gpus": [], "cpu_ids": [1]}
    for step_id in (0, 1):
        step = step_spec(user, base, 15, ["bash", "-c", STEP_HOLDS.format(release=release)])
        step["tasks"][0]["stdout"] = str(base / "out" / f"step-15.{step_id}.out")
        runner.launch({**step, "step_id": step_id, "allocation": holding})
    near = cgroups.node_cpus[1]  # the node's id 1 on this host (i mod n of its cpuset)
    for step_id in (0, 1):
        out = base / "out" / f"step-15.{step_id}.out"
        wait_until(lambda out=out: "Cpus_allowed" in out.read_text(), "the step printed its CPUs")
        assert f"Cpus_allowed_list:\t{near}\n" in out.read_text()
    job_dir = cgroups.dirs["memory"] / "job_15_steps_from_0"
    assert (job_dir / "memory.limit_in_bytes").read_text().strip() == str(64 * 1024 * 1024)
    assert cgroups.cpus_in_use == {(15, -1): (near,)}
    release.touch()
    assert [r["state"] for r in step_reports(runner, 2)] == ["COMPLETED", "COMPLETED"]
    wait_until(lambda: not job_dir.exists(), "the job's cgroup removed after its last step")
    assert cgroups.cpus_in_use == {}
    runner.close()


# --- what the node reports -------------------------------------------------------------------


def test_scontrol_show_node_shows_the_nodes_containment(tmp_path, fake_kernel):
    root, mountinfo = _fake_v2(tmp_path)
    cgroups = Cgroups("n4", Settings(root=str(root), pids_max=512), mountinfo=mountinfo)
    line = cgroups.node_line()
    assert line == ("CgroupPlugin=cgroup/v2 ConstrainCores=yes ConstrainRAMSpace=yes "
                    "ConstrainSwapSpace=yes ConstrainDevices=no PidsMax=512")
    node = {"name": "n4", "cpus": 8, "memory_mb": 1024, "state": "IDLE", "cgroup": line,
            "reason": cgroups.reason()}
    lines = node_lines(node, 0.0)
    assert lines[lines.index("CfgTRES=cpu=8,mem=1G,billing=8") + 2] == line
    assert not any(x.startswith("Reason=") for x in lines)  # everything set is enforced
    assert not any(x.startswith("CgroupPlugin") for x in node_lines({**node, "cgroup": ""}, 0))


def test_what_a_node_cannot_enforce_is_its_reason_until_it_can(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("31 25 0:27 / /proc rw - proc proc rw\n")
    bare = Cgroups("n5", Settings(root=str(tmp_path / "none")), mountinfo=str(mountinfo))
    assert bare.node_line() == "CgroupPlugin=(null)"
    said = bare.reason()
    assert said.startswith("cgroups: not enforced: ")
    assert agent_handlers._containment_reason("", said) == said
    assert agent_handlers._containment_reason(said, "") == ""  # enforced now: cleared
    assert agent_handlers._containment_reason("bad fan", said) == "bad fan"  # an admin's stays


@real
def test_a_cgroup_that_will_not_empty_is_reported_unkillable(base, user, cgroups, monkeypatch):
    strict = Cgroups(cgroups.node, replace(cgroups.settings, unkillable_step_timeout=0),
                     layout=cgroups.layout)
    lau = Launcher(base / "spool", cgroups.node, kill_wait=0, cgroups=strict)
    lau.launch(spec(user, base, 14, "#!/bin/sh\necho started\nsleep 600\n", kill_wait=0))
    wait_until(lambda: "started" in output(base, 14), "job started")
    monkeypatch.setattr(cg_mod.JobCgroup, "populated", lambda self, leaf=None: True)
    lau.terminate(14, 1)

    def said() -> bool:
        assert lau.poll() == []  # never ended while its cgroup is not empty
        return bool(lau.unkillable)

    wait_until(said, "unkillable reported")
    assert lau.unkillable == ["Kill task failed (job 14: processes unkillable)"]
    monkeypatch.undo()
    assert wait_for(lau, 14).state == "CANCELLED"
    lau.close()


@real
def test_a_leftover_cgroup_of_the_same_run_is_emptied_before_reuse(cgroups):
    first = cgroups.create(17, 1, Limits())
    fds = first.open_procs()
    child = subprocess.Popen(["sleep", "1017"], preexec_fn=lambda: cg_mod.join_fds(fds))
    for fd in fds:
        os.close(fd)
    wait_until(lambda: child.pid in first.pids(), "the sleeper joined")
    again = cgroups.create(17, 1, Limits())  # an agent that lost its spool record
    assert child.wait(timeout=60) == -9
    wait_until(lambda: not again.populated(), "the leftover cgroup emptied")
    assert again.remove()


@real
@pytest.mark.parametrize("cloned", [True, False], ids=["cloned", "copied"])
def test_a_new_cpuset_has_exactly_the_nodes_memory_and_the_jobs_cpus(monkeypatch, cloned):
    """Born under cgroup.clone_children (the kernel's copy) or copied by the agent where the
    kernel does not clone: the job's cpuset holds the node's memory nodes and exactly the
    job's CPUs, and a step's leaf exactly the job's."""
    if not cloned:
        monkeypatch.setattr(cg_mod, "_clone_children", lambda node_dir: False)
    made = Cgroups(f"t{secrets.token_hex(3)}", Settings(pids_max=256), layout=_HOST)
    try:
        assert made.cpuset_clones is cloned
        node = made.dirs["cpuset"]
        if len(made.node_cpus) < 2:
            pytest.skip("needs two CPUs")
        job = made.create(31, 1, made.limits((31, 1), 1, 64, [], cpu_ids=[1]))
        where = job.dirs["cpuset"]
        assert (where / "cpuset.mems").read_text() == (node / "cpuset.mems").read_text() != "\n"
        assert cg_mod.parse_cpu_list((where / "cpuset.cpus").read_text()) == \
            (made.node_cpus[1],) == job.cpus
        job.add_leaf("step_0")
        leaf = where / "step_0"
        assert (leaf / "cpuset.cpus").read_text() == (where / "cpuset.cpus").read_text()
        assert (leaf / "cpuset.mems").read_text() == (node / "cpuset.mems").read_text()
        assert job.remove()
        made.release((31, 1))
    finally:
        made.close()


@real
@pytest.mark.parametrize("by", ["supervisor", "agent"])
def test_the_ends_counters_and_removal_by_the_supervisor_or_else_the_agent(
        monkeypatch, base, user, cgroups, by):
    """The supervisor reads an emptied cgroup's counters (OOM kills, peak, CPU) and removes
    it, in parallel with the agent's loop; where it did not (an older supervisor, a cgroup
    that stayed), the agent does. Either way the job is OUT_OF_MEMORY with the cgroup's own
    peak, and nothing of its cgroup is left."""
    if by == "supervisor":  # the agent must not need its own reads or rmdir
        for name in ("oom_kills", "max_rss_kb", "cpu_seconds", "remove"):
            monkeypatch.setattr(cg_mod.JobCgroup, name, lambda self, *a, name=name: pytest.fail(
                f"the agent called {name}"))
    else:  # patched before the first launch: the fork server's supervisors have it
        monkeypatch.setattr(cgroupfs.Tree, "finish", lambda self: None)
    lau = Launcher(base / "spool", cgroups.node, kill_wait=2, cgroups=cgroups)
    try:
        lau.launch(spec(user, base, 41, HOG, memory_mb=100))
        done = wait_for(lau, 41)
        assert done.state == "OUT_OF_MEMORY"
        assert done.max_rss_kb > 50 * 1024
        assert done.cpu_user is not None and done.cpu_user + done.cpu_system > 0
        assert not any((where / "job_41_1").exists() for where in cgroups.dirs.values())
        assert cgroups.cpus_in_use == {}
    finally:
        lau.close()


def test_the_agent_takes_the_supervisors_counters_only_from_a_removed_cgroup():
    from agentd.launcher import _cgroup_end
    good = {"oom_kills": 1, "max_rss_kb": 2048, "cpu": [0.5, 0.25], "removed": True}
    assert _cgroup_end({"cgroup_end": good}) == {"oom_kills": 1, "max_rss_kb": 2048,
                                                 "cpu": (0.5, 0.25)}
    assert _cgroup_end({"cgroup_end": {**good, "removed": False}}) is None  # it stayed
    assert _cgroup_end({"cgroup_end": None}) is None  # a process was still in it
    assert _cgroup_end({"state": "COMPLETED"}) is None  # an older supervisor
    assert _cgroup_end(None) is None  # no exit file
    assert _cgroup_end({"cgroup_end": {"removed": True, "oom_kills": "x"}}) is None


# --- MIG: the parent GPU and the instance's caps, nothing else --------------------------------

MIG_OPENER = """#!/usr/bin/env python3
import os
for name in ("nvidia0", "nvidia1", "nvidia-caps/nvidia-cap12", "nvidia-caps/nvidia-cap13",
             "nvidia-caps/nvidia-cap21", "nvidia-caps/nvidia-cap22"):
    try:
        os.close(os.open("{dev}/" + name, os.O_RDONLY))
        print(name, "opened")
    except OSError as exc:
        print(name, exc.strerror)
"""


def _mig_devices(dev: Path) -> dict[str, tuple[int, int]]:
    """Stand-ins for two GPUs and the caps of two MIG instances of GPU 0 (gi 1: caps 12 and
    13; gi 2: caps 21 and 22), with the numbers of harmless devices (full, random, urandom,
    null, zero, ptmx) so a job denied them misses nothing it needs."""
    numbers = {"nvidia0": (1, 7), "nvidia1": (1, 8), "nvidia-caps/nvidia-cap12": (1, 9),
               "nvidia-caps/nvidia-cap13": (1, 3), "nvidia-caps/nvidia-cap21": (1, 5),
               "nvidia-caps/nvidia-cap22": (5, 2)}
    (dev / "nvidia-caps").mkdir(parents=True)
    for name, (major, minor) in numbers.items():
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(dev / name, 0o666)
    return numbers


def test_a_mig_job_is_denied_the_other_gpus_and_the_other_instances_caps(tmp_path, fake_kernel):
    root, mountinfo = _fake_v2(tmp_path)
    numbers = _mig_devices(tmp_path / "dev")
    cgroups = Cgroups("n9", Settings(root=str(root), device_dir=str(tmp_path / "dev")),
                      mountinfo=mountinfo)
    # instances 0 and 1 on GPU 0, instance 2 on GPU 1 (its caps not in /dev here)
    cgroups.set_mig({0: (0, (12, 13)), 1: (0, (21, 22)), 2: (1, (147, 148))})
    deny = set(cgroups.limits((1, 1), cpus=1, memory_mb=0, gpus=[0]).deny_devices)
    assert deny == {("c", *numbers[n]) for n in ("nvidia1", "nvidia-caps/nvidia-cap21",
                                                 "nvidia-caps/nvidia-cap22")}
    deny = set(cgroups.limits((2, 1), cpus=1, memory_mb=0, gpus=[2]).deny_devices)
    assert deny == {("c", *numbers[n]) for n in ("nvidia0", "nvidia-caps/nvidia-cap12",
                                                 "nvidia-caps/nvidia-cap13",
                                                 "nvidia-caps/nvidia-cap21",
                                                 "nvidia-caps/nvidia-cap22")}
    both = cgroups.limits((3, 1), cpus=1, memory_mb=0, gpus=[0, 1]).deny_devices
    assert both == (("c", *numbers["nvidia1"]),)
    cgroups.set_mig({})  # no MIG: whole GPUs as before, the caps are no GPU's
    assert cgroups.limits((4, 1), cpus=1, memory_mb=0, gpus=[0]).deny_devices == (
        ("c", *numbers["nvidia1"]),)
    cgroups.close()


@real
def test_only_the_mig_jobs_parent_gpu_and_caps_can_be_opened(base, user, cgroups):
    dev = base / "out" / "dev"
    _mig_devices(dev)
    with_gpus = Cgroups(cgroups.node, replace(cgroups.settings, device_dir=str(dev)),
                        layout=cgroups.layout)
    with_gpus.set_mig({0: (0, (12, 13)), 1: (0, (21, 22))})
    lau = Launcher(base / "spool", cgroups.node, kill_wait=2, cgroups=with_gpus)
    lau.launch(spec(user, base, 21, MIG_OPENER.format(dev=dev), gpus=[0]))
    assert wait_for(lau, 21).state == "COMPLETED"
    assert output(base, 21) == (
        "nvidia0 opened\nnvidia1 Operation not permitted\n"
        "nvidia-caps/nvidia-cap12 opened\nnvidia-caps/nvidia-cap13 opened\n"
        "nvidia-caps/nvidia-cap21 Operation not permitted\n"
        "nvidia-caps/nvidia-cap22 Operation not permitted\n")
    lau.close()
    with_gpus.close()
