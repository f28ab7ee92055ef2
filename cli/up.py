"""``kiln up`` / ``kiln down`` / ``kiln status``: a whole cluster on this machine, in one command.

Where it lives (``Install``) depends on who asks:

- **root, with neither ``$KILN_HOME`` nor ``$KILN_CONF`` set: a system install**, which every
  user of the machine finds with no environment at all (the commands' lookup ends at
  ``/etc/kiln/kiln.toml``): config ``/etc/kiln/kiln.toml`` (0644), the commands' socket under
  ``/run/kiln``, state (SQLite ledger, keys, pid files, the agents' spool) under
  ``/var/lib/kiln``, logs under ``/var/log/kiln``. root's own jobs are refused there, as on
  any cluster (``allow_root_jobs = false``);
- **anyone else, or root with ``$KILN_HOME`` set: a personal cluster** in ``$KILN_HOME``
  (default ``~/.kiln``): ``kiln.toml``, the ledger, the socket, ``log/`` and ``run/``.

``kiln up`` is idempotent: run again, it starts whatever part of the cluster is not running.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

from kiln import config as kconfig
from kiln import paths
from schedd import statedir

DEFAULT_FAKE_GPUS = "8xH100-80GB"
FAKE_NODE_CPUS = 64  # a pretend GPU node offers what a real one has (CPUs are overcommitted)
START_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Install:
    """Where one cluster's files are: a system install (root's, for every user) or a
    personal one (``$KILN_HOME``)."""

    conf: Path  # kiln.toml
    home: Path  # the ledger, keys/, run/ (pid files, layout.json), spool/
    socket: Path  # the commands' socket
    log_dir: Path
    system: bool

    @property
    def run(self) -> Path:
        return self.home / "run"


SYSTEM = Install(conf=Path(paths.SYSTEM_CONF), home=Path("/var/lib/kiln"),
                 socket=Path("/run/kiln/schedd.sock"), log_dir=Path("/var/log/kiln"),
                 system=True)


def install() -> Install:
    """The cluster ``kiln up``/``down``/``status`` mean here (see the module's doc)."""
    if os.geteuid() == 0 and not os.environ.get("KILN_HOME") and not os.environ.get("KILN_CONF"):
        return SYSTEM
    if os.environ.get("KILN_CONF") and not os.environ.get("KILN_HOME"):
        conf = Path(os.environ["KILN_CONF"])
        raw = paths.read_raw(str(conf))[1] if conf.exists() else {}
        home = Path(paths.home_of(str(conf), raw))
        return Install(conf=conf, home=home, socket=home / "schedd.sock",
                       log_dir=home / "log", system=False)
    home = kconfig.kiln_home()
    return Install(conf=home / "kiln.toml", home=home, socket=home / "schedd.sock",
                   log_dir=home / "log", system=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))


def write_config(where: Install, db_url: str, fake_gpus: str, fake_mig: str = "") -> Path:
    home = where.home
    db_line = f"db_url = {_toml_value(db_url or 'sqlite:///' + str(home / 'kiln.db'))}"
    if db_url and statedir.has_password(db_url):  # kiln.toml stays world-readable
        secret = home / "db_url"
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(db_url + "\n")
        db_line = f"db_url_file = {_toml_value(str(secret))}  # 0600: it holds a password"
    # root's jobs run only where the config says so (SPEC §5); a personal cluster of root's
    # (KILN_HOME set) is root's own, and `kiln up` says so when it writes it
    allow_root = os.geteuid() == 0 and not where.system
    lines = [
        "# kiln cluster made by `kiln up`; edit freely, then `kiln down && kiln up`.",
        f"cluster_name = {_toml_value('kiln')}",
        *([f"home = {_toml_value(str(home))}"] if where.system else []),
        "",
        "[schedd]",
        db_line,
        f"client_endpoint = {_toml_value('ipc://' + str(where.socket))}",
        *([f"log_dir = {_toml_value(str(where.log_dir))}"] if where.system else []),
        f"agent_endpoint = {_toml_value(f'tcp://127.0.0.1:{_free_port()}')}",
        "kill_wait = 30",
        "min_job_age = 300",
        "# jobs of root run only where this says so",
        f"allow_root_jobs = {_toml_value(allow_root)}",
        "# agents authenticate with CURVE keys from keys/ (`kiln keygen --node NAME` adds one)",
        "curve = true",
        "",
        "[agent]",
        f"fake_gpus = {_toml_value(fake_gpus)}",
        *([f"fake_mig = {_toml_value(fake_mig)}"] if fake_mig else []),
        "",
        "[[partition]]",
        'name = "gpu"',
        "default = true",
        "",
    ]
    fd = os.open(where.conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    os.fchmod(fd, 0o644)  # every user's commands read it (it holds no secret)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines))
    return where.conf


def topology_text(names: list[str], plugin: str, count: int) -> str:
    """``--topology-blocks N`` / ``--topology-switches N``: the nodes in order in N groups, as
    kiln.toml's [topology] table (kiln/slurm/topology.grouped)."""
    from kiln.slurm.topology import grouped

    table = grouped(names, plugin, count)
    key = "blocks" if plugin == "block" else "switches"
    rows = []
    for entry in table[key]:
        members = f'nodes = {_toml_value(entry["nodes"])}' if "nodes" in entry \
            else f'switches = {_toml_value(entry["switches"])}'
        rows.append(f'  {{name = {_toml_value(entry["name"])}, {members}}},')
    return "\n".join(["", "[topology]", f"plugin = {_toml_value(table['plugin'])}",
                      f"{key} = [", *rows, "]", ""])


def add_topology(conf: Path, names: list[str], plugin: str, count: int) -> None:
    """Append the grouped [topology] to kiln.toml, unless it already says the same."""
    from kiln.slurm.topology import TopologyError

    try:
        text = topology_text(names, plugin, count)
        cfg = kconfig.load(conf)
    except (TopologyError, kconfig.ConfigError) as exc:
        raise click.ClickException(str(exc)) from None
    if cfg.topology is not None:
        if text.strip() in conf.read_text():
            return  # kiln up again with the same grouping
        raise click.ClickException(f"{conf} already has a [topology]: edit it there")
    with open(conf, "a", encoding="utf-8") as fh:
        fh.write(text)


def _make_dirs(where: Install) -> None:
    """The cluster's directories with their modes: others traverse the home (kiln.toml, the
    socket, their scripts under spool/) but list nothing; the ledger, logs, pid files and keys
    are root's (schedd/statedir.py)."""
    dirs = [(where.home, 0o711), (where.home / "run", 0o700), (where.home / "spool", 0o711),
            (where.log_dir, 0o700)]
    if where.system:
        dirs += [(where.conf.parent, 0o755), (where.socket.parent, 0o755)]
    for path, mode in dirs:
        path.mkdir(parents=True, mode=mode, exist_ok=True)
        path.chmod(mode)


def _pid_alive(pid_file: Path) -> int:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return 0
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return 0
    return pid if b"schedd" in cmdline or b"agentd" in cmdline else 0


def daemon_command(module: str) -> list[str]:
    """How kiln up starts a daemon: this interpreter running kiln's own ``module``. ``-P``
    keeps the working directory off ``sys.path``: `kiln up` run inside another kiln checkout
    (or any directory holding a ``schedd/`` or ``agentd/``) must not start that copy's code."""
    return [sys.executable, "-P", "-m", module]


def _spawn(args: list[str], log_file: Path, pid_file: Path, env: dict[str, str]) -> int:
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)  # what a daemon prints is root's, like its log
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, env=env, close_fds=True)
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def _default_gpus() -> str:
    """No --fake-gpus: the host's real GPUs ("") when NVML finds some; fake ones, said aloud,
    when there is no NVIDIA driver; and a stop with NVML's own error when the driver is there
    but NVML fails: a GPU host must not quietly come up with pretend GPUs."""
    from agentd.gpus import GPUDiscoveryError, discover

    try:
        found = discover("")
    except GPUDiscoveryError as exc:
        raise click.ClickException(
            f"{exc}; fix the driver, or pass --fake-gpus SPEC (e.g. --fake-gpus "
            f"{DEFAULT_FAKE_GPUS}) to run with pretend GPUs") from None
    if found:
        return ""
    click.echo(f"kiln up: NVML found no GPUs here (no NVIDIA driver): each node gets "
               f"{DEFAULT_FAKE_GPUS} fake GPUs, whose figures in sacct and seff are simulated",
               err=True)
    return DEFAULT_FAKE_GPUS


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise click.ClickException(f"{what} did not come up within {timeout:.0f} s")


def _ping(cfg: kconfig.Config) -> bool:
    from cli.core.client import Client, ClientError

    try:
        with Client(cfg=cfg, timeout=1.0) as client:
            client.call("ping")
        return True
    except ClientError:
        return False


def _alive_nodes(cfg: kconfig.Config) -> set[str]:
    from cli.core.client import Client, ClientError

    try:
        with Client(cfg=cfg, timeout=2.0) as client:
            nodes = client.call("query_nodes")["nodes"]
    except ClientError:
        return set()
    return {n["name"] for n in nodes if n.get("state_display") != "DOWN"}


def _containment_reasons(cfg: kconfig.Config, names: list[str]) -> list[str]:
    """What this host's agents said they cannot enforce (their nodes' ``cgroups: ...``
    reasons), one per distinct text."""
    from cli.core.client import Client, ClientError

    try:
        with Client(cfg=cfg, timeout=2.0) as client:
            nodes = client.call("query_nodes", {"names": names})["nodes"]
    except ClientError:
        return []
    return sorted({n["reason"] for n in nodes if str(n.get("reason", "")).startswith("cgroups: ")})


@click.command()
@click.option("--nodes", "num_nodes", type=click.IntRange(1, 512), default=None,
              help="agents to run on this host, each a node (default 1)")
@click.option("--fake-gpus", default=None,
              help=f"GPUs each node pretends to have, e.g. 4xA100 (default: real GPUs via "
                   f"NVML, else {DEFAULT_FAKE_GPUS})")
@click.option("--fake-mig", default=None,
              help="MIG instances each fake GPU is partitioned into, e.g. 3g.40gb:2 or "
                   "1g.10gb:7 (default: kiln.toml's [agent] fake_mig; none)")
@click.option("--cpus", type=click.IntRange(1, 100_000), default=None,
              help=f"CPUs each node offers (default: the host's; {FAKE_NODE_CPUS} with fake GPUs)")
@click.option("--db-url", default="", help="ledger URL (default SQLite in $KILN_HOME)")
@click.option("--shards-per-gpu", type=click.IntRange(0, 4096), default=None,
              help="gres/shard: shards each GPU offers to --gres=shard:N jobs (default: "
                   "kiln.toml's [agent] shards_per_gpu)")
@click.option("--mps-per-gpu", type=click.IntRange(0, 4096), default=None,
              help="gres/mps: MPS units each GPU offers to --gres=mps:N jobs, e.g. 100 "
                   "(default: kiln.toml's [agent] mps_per_gpu)")
@click.option("--topology-blocks", type=click.IntRange(1, 512), default=None,
              help="topology/block: the nodes in order in N blocks ([topology] in kiln.toml)")
@click.option("--topology-switches", type=click.IntRange(1, 512), default=None,
              help="topology/tree: the nodes in order under N leaf switches and a top one")
def up(num_nodes: int | None, fake_gpus: str | None, fake_mig: str | None, cpus: int | None,
       db_url: str, shards_per_gpu: int | None, mps_per_gpu: int | None,
       topology_blocks: int | None, topology_switches: int | None) -> None:
    """Start schedd and agents on this host (idempotent). As root: a system install that
    every user finds (/etc/kiln/kiln.toml); otherwise a personal cluster in $KILN_HOME."""
    where = install()
    _make_dirs(where)
    home = where.home
    layout_file = where.run / "layout.json"
    layout = json.loads(layout_file.read_text()) if layout_file.exists() else {}
    conf_path = where.conf
    if (fake_gpus is None or fake_mig is None) and conf_path.exists():
        try:  # kiln.toml says what the nodes pretend
            agent_conf = kconfig.load(conf_path).agent
        except kconfig.ConfigError as exc:
            raise click.ClickException(str(exc)) from None
        fake_gpus = agent_conf.fake_gpus if fake_gpus is None else fake_gpus
        fake_mig = agent_conf.fake_mig if fake_mig is None else fake_mig
    if fake_gpus is None:
        fake_gpus = _default_gpus()
    fake_mig = fake_mig or ""
    if fake_mig:
        _check_fake_mig(fake_gpus, fake_mig)
    num_nodes = num_nodes or layout.get("nodes") or 1
    cpus = cpus or layout.get("cpus") or (FAKE_NODE_CPUS if fake_gpus else 0)
    shape = {"nodes": num_nodes, "fake_gpus": fake_gpus, "fake_mig": fake_mig, "cpus": cpus}
    _check_shape(where, layout, shape)
    wrote = not conf_path.exists()
    if wrote:
        write_config(where, db_url, fake_gpus, fake_mig)
    if shards_per_gpu is None:  # the agents keep what they were started with
        shards_per_gpu = layout.get("shards_per_gpu")
    if mps_per_gpu is None:
        mps_per_gpu = layout.get("mps_per_gpu")
    layout_file.write_text(json.dumps({**shape, "shards_per_gpu": shards_per_gpu,
                                       "mps_per_gpu": mps_per_gpu}))
    names = [f"node{i}" for i in range(1, num_nodes + 1)]
    if topology_blocks and topology_switches:
        raise click.ClickException("--topology-blocks and --topology-switches: one or the other")
    if topology_blocks or topology_switches:
        add_topology(conf_path, names, "block" if topology_blocks else "switch",
                     topology_blocks or topology_switches or 0)
    try:
        cfg = kconfig.load(conf_path)
    except kconfig.ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    from kiln import keys, tokens
    from schedd.ledger.migrate import upgrade

    try:
        upgrade(cfg.db_url)
    except Exception as exc:
        raise click.ClickException(f"cannot prepare the ledger: {exc}") from None
    if cfg.curve:
        keys.generate_cluster(cfg.keys_path, names)
    tokens.generate_key(cfg.keys_path)  # auth/jwt (scontrol token, kiln restd)
    env = {**os.environ, "KILN_CONF": str(conf_path)}
    logs, run = Path(cfg.log_dir), where.run
    logs.mkdir(parents=True, mode=0o700, exist_ok=True)
    started = []
    if not _pid_alive(run / "schedd.pid"):
        _spawn([*daemon_command("schedd.daemon"), "--config", str(conf_path),
                "--log-file", str(logs / "schedd.log")], logs / "schedd.out",
               run / "schedd.pid", env)
        started.append("schedd")
    _wait(lambda: _ping(cfg), START_TIMEOUT, "schedd")
    for name in names:
        if _pid_alive(run / f"agentd-{name}.pid"):
            continue
        args = [*daemon_command("agentd.daemon"), "--config", str(conf_path),
                "--node", name, "--log-file", str(logs / f"agentd-{name}.log"),
                "--spool", str(home / "spool" / name),
                "--serve-commands", "no"]  # schedd serves this host's commands
        if fake_gpus:
            args += ["--fake-gpus", fake_gpus]
        if fake_mig:
            args += ["--fake-mig", fake_mig]
        if cpus:
            args += ["--cpus", str(cpus)]
        if shards_per_gpu is not None:
            args += ["--shards-per-gpu", str(shards_per_gpu)]
        if mps_per_gpu is not None:
            args += ["--mps-per-gpu", str(mps_per_gpu)]
        _spawn(args, logs / f"agentd-{name}.out", run / f"agentd-{name}.pid", env)
        started.append(f"agentd {name}")
    _wait(lambda: set(names) <= _alive_nodes(cfg), START_TIMEOUT, "the agents")
    _report(where, cfg, names, fake_gpus + (f", MIG {fake_mig}" if fake_mig else ""), started,
            wrote)


def _check_fake_mig(fake_gpus: str, fake_mig: str) -> None:
    """--fake-mig partitions fake GPUs, into instances that fit them: said before anything
    starts, in the agents' own words."""
    from agentd.gpus import fake_gpus as make_fake
    from agentd.gpus import fake_mig_gpus

    if not fake_gpus or fake_gpus == "0":
        raise click.ClickException("--fake-mig partitions fake GPUs: give --fake-gpus too")
    try:
        fake_mig_gpus(make_fake(fake_gpus, seed="check"), fake_mig, "check")
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _describe(shape: dict) -> str:
    gpus = shape.get("fake_gpus") or "GPUs from NVML"
    if shape.get("fake_mig"):
        gpus += f", MIG {shape['fake_mig']}"
    return f"{shape.get('nodes')} node(s), {gpus}, {shape.get('cpus') or 'all'} CPUs each"


def _check_shape(where: Install, layout: dict, shape: dict) -> None:
    """``kiln up`` never reshapes nodes behind the user's back (run/layout.json keeps the shape
    the nodes were started with). Running nodes keep theirs: a different GPU spec or CPU
    count, or fewer nodes, stops with what to do; more nodes are added. A stopped cluster
    takes the new shape, and says so."""
    if not layout:
        return
    old = {k: layout.get(k, "" if k == "fake_mig" else None) for k in shape}
    if old == shape:
        return
    running = sorted(p.stem.replace("agentd-", "") for p in where.run.glob("agentd-*.pid")
                     if _pid_alive(p))
    same_nodes = (old["fake_gpus"], old["fake_mig"], old["cpus"]) == (
        shape["fake_gpus"], shape["fake_mig"], shape["cpus"])
    if running and not (same_nodes and shape["nodes"] > (old["nodes"] or 0)):
        raise click.ClickException(
            f"the cluster runs as {_describe(old)} (nodes {', '.join(running)}); kiln up does "
            f"not reshape running nodes to {_describe(shape)}: `kiln down` first, then "
            "`kiln up` with the new shape")
    verb = "adding nodes" if running else "reshaping the cluster"
    click.echo(f"kiln up: {verb}: from {_describe(old)} to {_describe(shape)}", err=True)


def _report(where: Install, cfg: kconfig.Config, names: list[str], fake_gpus: str,
            started: list[str], wrote: bool) -> None:
    """What is up, where its files are, and how a user reaches it."""
    from schedd.ledger.engine import show_url

    gpus = fake_gpus or "GPUs from NVML"
    click.echo(f"kiln is up: schedd and {len(names)} node(s) ({', '.join(names)}; {gpus})"
               + (f"; started {', '.join(started)}" if started else "; all already running"))
    click.echo(f"  config:           {where.conf}")
    click.echo(f"  state:            {where.home}  (ledger {show_url(cfg.db_url)})")
    click.echo(f"  logs:             {cfg.log_dir}")
    unenforced = _containment_reasons(cfg, names)
    if unenforced:  # said once, for the host: every agent here shares its cgroups
        click.echo(f"  containment:      {unenforced[0]} (docs/agent.md, Containment)")
    job = "sbatch --gres=gpu:1 --wrap 'echo $CUDA_VISIBLE_DEVICES'"
    if where.system:
        click.echo(f"  use it:           any user, no environment needed: {job}")
    elif where.home == Path(os.path.expanduser("~")) / ".kiln":
        click.echo(f"  use it:           {job}")
    else:
        click.echo(f"  use it:           export KILN_HOME={where.home}; {job}")
    if cfg.allow_root_jobs and wrote:
        click.echo(f"  root's jobs run here: allow_root_jobs = true in {where.conf} (a personal "
                   "cluster of root's)")
    elif os.geteuid() == 0 and not cfg.allow_root_jobs:
        click.echo(f"  root's jobs are refused (allow_root_jobs = false in {where.conf}); "
                   "submit as a user")
    home_conf = Path(os.path.expanduser("~")) / ".kiln" / "kiln.toml"
    if where.system and home_conf.exists():
        click.echo(f"  warning: {home_conf} exists, and root's commands find it before "
                   f"{where.conf}: move it away to reach this cluster", err=True)


@click.command()
@click.option("--cancel", is_flag=True,
              help="Cancel every pending and running job first (as scancel would).")
def down(cancel: bool) -> None:
    """Stop the agents and schedd started by 'kiln up'. Running jobs are left alone (their
    processes go on, and 'kiln up' takes them back) unless --cancel cancels them first; the
    output says how many were left."""
    where = install()
    cfg = kconfig.load(where.conf) if where.conf.exists() else None
    live = _live_jobs(cfg) if cfg is not None else {}
    if cancel and live:
        _cancel_all(cfg, sorted(live))
        live = {}
    stopped = _stop_daemons(where.run)
    click.echo(f"kiln is down ({stopped} daemon(s) stopped)")
    if live:
        running = sum(1 for state in live.values() if state != "PENDING")
        click.echo(f"{len(live)} job(s) left: {running} running (their processes go on; "
                   f"'kiln up' takes them back), {len(live) - running} pending; "
                   "'kiln down --cancel' cancels them before stopping")


def _live_jobs(cfg: kconfig.Config) -> dict[str, str]:
    """Each job schedd still has pending or running (id -> state); empty when it does not
    answer (nothing to report then)."""
    from cli.core.client import Client, ClientError

    try:
        with Client(cfg=cfg, timeout=2.0) as client:
            jobs = client.call("query_jobs", {"states": ["PENDING", "RUNNING", "SUSPENDED"]})
    except ClientError:
        return {}
    return {str(j["id"]): str(j.get("state") or "")
            for j in jobs.get("jobs") or []}


def _cancel_all(cfg: kconfig.Config, ids: list[str]) -> None:
    """Cancel ``ids`` and wait (up to 30 s) until schedd has none of them live."""
    from cli.core.client import Client, ClientError

    try:
        with Client(cfg=cfg, timeout=10.0) as client:
            client.call("cancel", {"job_ids": ids})
    except ClientError as exc:
        raise click.ClickException(f"could not cancel the jobs: {exc.message}") from None
    deadline = time.time() + 30
    while time.time() < deadline and _live_jobs(cfg):
        time.sleep(0.2)
    click.echo(f"cancelled {len(ids)} job(s)")


def _stop_daemons(run: Path) -> int:
    pid_files = sorted(run.glob("agentd-*.pid")) + [run / "schedd.pid"]
    stopped = []
    for pid_file in pid_files:
        pid = _pid_alive(pid_file)
        if pid:
            os.kill(pid, signal.SIGTERM)
            stopped.append((pid_file, pid))
    deadline = time.time() + 10
    for pid_file, pid in stopped:
        while time.time() < deadline and _pid_alive(pid_file):
            time.sleep(0.05)
        if _pid_alive(pid_file):
            os.kill(pid, signal.SIGKILL)
        pid_file.unlink(missing_ok=True)
    return len(stopped)


@click.command()
def status() -> None:
    """Each daemon of this host's cluster with its pid, and the nodes schedd sees."""
    where = install()
    run = where.run
    if not where.conf.exists():
        raise click.ClickException(f"no kiln cluster at {where.conf}: run `kiln up`")
    rows = [("schedd", run / "schedd.pid")]
    rows += [(p.stem.replace("agentd-", "agentd "), p) for p in sorted(run.glob("agentd-*.pid"))]
    down_count = 0
    for name, pid_file in rows:
        pid = _pid_alive(pid_file)
        down_count += not pid
        click.echo(f"{name:<16} {'running, pid ' + str(pid) if pid else 'not running'}")
    cfg = kconfig.load(where.conf)
    if _ping(cfg):
        alive = _alive_nodes(cfg)
        click.echo(f"schedd answers; {len(alive)} node(s) up: {', '.join(sorted(alive))}")
    if down_count:
        sys.exit(1)
