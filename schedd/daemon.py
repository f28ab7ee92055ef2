"""schedd: the controller process.

The main loop, in order, every turn:
1. wait for a message or the next timer (whichever is first);
2. answer every ready request (clients on ipc, agents on tcp), each committed before it is
   answered;
3. run a scheduling cycle if something changed (or the interval passed): ``lifecycle/cycle.py``
   applies its decisions (commit the starts, then tell the agents);
4. the timers: preemption, health, housekeeping (forget finished jobs older than MinJobAge).

The loop only: sockets, dispatch and timers. Handlers, timers and the cycle are handed the
services object (``schedd.lifecycle.context.Context``), never the daemon; nothing imports this module.
One thread owns all state; the scheduler core is a pure function called from step 3.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Generator, Iterator
from types import GeneratorType
from typing import Any

import zmq

from kiln import config as kconfig
from kiln import keys
from kiln.identity import Caller, set_admin_lookup
from kiln.logs import setup_logging
from kiln.wire import operations, protocol
from kiln.wire.localsock import LocalServer, Reply, Stream, Work
from schedd import leader, offload, restrelay, slicing, statedir
from schedd.collector import Collector
from schedd.domain.steps import StepTable
from schedd.ledger.records import SchemaError
from schedd.ledger.store import Store
from schedd.lifecycle import (
    cycle,
    enforcement,
    gpuhealth,
    health,
    mail,
    preemption,
    reboot,
    victims,
)
from schedd.lifecycle.agents import AgentRegistry
from schedd.lifecycle.context import Context, RequestError
from schedd.lifecycle.pace import Pace
from schedd.lifecycle.planner import Planner
from schedd.loopwatch import LoopWatch
from schedd.relay import Pending, RelayError, Relays
from schedd.reports import metrics
from schedd.reports.diag import SchedulerDiag
from schedd.routes import AGENT_HANDLERS, CLIENT_HANDLERS
from schedd.state import State

log = logging.getLogger("schedd")

RELAY_OPS = frozenset({"relay", "relay_next", "relay_hello"})
MAX_BATCH = 2000  # requests answered per turn before the scheduler gets a look-in


class Daemon:
    def __init__(self, cfg: kconfig.Config, clock: Callable[[], float] = time.time):
        self.cfg = cfg
        self.clock = clock
        store = Store(cfg.db_url)
        store.check_schema()
        self.state = State(cfg, store)
        self.state.load(self.now())
        set_admin_lookup(lambda uid: self.state.accounts.admin_level(uid))
        self.ctx = zmq.Context()
        # the commands' endpoint: a Unix stream socket, identity from SO_PEERCRED
        self.local = LocalServer(cfg.client_endpoint, self._handle_client,
                                 max_unsent_total=cfg.reply_buffer_bytes,
                                 max_unsent_per_uid=cfg.reply_buffer_per_user_bytes)
        self.keyring = self._start_curve() if cfg.curve else None
        self.agent_sock = self._bind(zmq.ROUTER, cfg.agent_endpoint, curve=cfg.curve)
        self.agent_sock.setsockopt(zmq.ROUTER_MANDATORY, 0)
        agents = AgentRegistry(cfg, self.agent_sock)  # launches go out through it
        # commands of other nodes, relayed by their agents (schedd/relay.py)
        self.relays = Relays(cfg.relay_root_nodes, self._send_relay)
        tracker = victims.Tracker.from_state(self.state)  # victims in GraceTime
        self.offload = offload.Offload()  # forecasts and the shape advisor, off the loop
        # what handlers, timers and the cycle are handed (schedd/lifecycle/context.py)
        self.services = ctx = Context(
            cfg=cfg, state=self.state, steps=StepTable(), agents=agents, preemption=tracker,
            planner=Planner(cfg, self.state, agents, tracker), mail=mail.Outbox(cfg),
            diag=SchedulerDiag(since=time.time()), offload=self.offload,
            metrics=metrics.start(cfg, self.state, self.now), pace=Pace(),
            clock=self.now)
        self.collector = Collector(self.now())  # the cyclic GC's pauses (schedd/collector.py)
        # named timers of the loop: (name, seconds between runs, what runs)
        self.timers: list[tuple[str, float, Callable[[float], None]]] = [
            ("preemption", 0.0, lambda now: preemption.tick(ctx, tracker, now)),
            ("gpuhealth", 0.5, lambda now: gpuhealth.tick(ctx, now)),  # jobs on failed GPUs
            ("health", 1.0, self._health),
            ("reboot", 1.0, lambda now: reboot.tick(ctx, now)),  # scontrol reboot
            ("purge", 5.0, self.state.purge),
            ("collector", 1.0, lambda now: self.collector.tick(now)),
        ]
        if cfg.scheduler.forecast_interval > 0:  # p50/p90 starts for kiln stats
            self.timers.append(("forecast", cfg.scheduler.forecast_interval,
                                lambda now: cycle.publish_quantiles(ctx, now)))
        if self.keyring is not None and self.keyring.refusals is not None:
            refusals = self.keyring.refusals  # the count of refusals a peer repeated
            self.timers.append(("log_summaries", 10.0, lambda now: refusals.flush()))
        self._timer_last = {name: 0.0 for name, _, _ in self.timers}
        self._stopping = False
        self.watch = LoopWatch.from_env()  # KILN_SLOW_TURN_MS: log what held a slow turn
        self.local.timed = self.watch.add  # and the client server's closes and releases
        self.lease: leader.LeaderLease | None = None  # held while this schedd leads (HA)

    def _start_curve(self) -> keys.AgentKeyring:
        """Agents must present a key from keys_dir/authorized (ZeroMQ's ZAP, in a thread)."""
        from zmq.auth.thread import ThreadAuthenticator

        keyring = keys.AgentKeyring(self.cfg.keys_path, log)
        self._auth = ThreadAuthenticator(self.ctx)
        self._auth.start()
        self._auth.configure_curve_callback("*", credentials_provider=keyring)
        return keyring

    def _bind(self, kind: int, endpoint: str, curve: bool = False) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        if curve:
            sock.curve_publickey, sock.curve_secretkey = keys.load_secret(
                keys.server_secret(self.cfg.keys_path))
            sock.curve_server = True
        sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_MESSAGE_BYTES)
        if endpoint.startswith("ipc://") and os.path.exists(endpoint[6:]):
            os.unlink(endpoint[6:])  # a stale socket of a dead schedd
        sock.bind(endpoint)
        return sock

    def _send_relay(self, frames: list[bytes]) -> None:
        try:
            self.agent_sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            log.warning("could not send a relayed reply: %s", exc)

    def now(self) -> float:
        return self.clock()

    # --- main loop -----------------------------------------------------------------------------

    def run(self) -> None:
        poller = zmq.Poller()
        self.local.register(poller)
        poller.register(self.agent_sock, zmq.POLLIN)
        poller.register(self.offload.fileno(), zmq.POLLIN)
        log.info("schedd listening: clients %s, agents %s", self.cfg.client_endpoint,
                 self.cfg.agent_endpoint)
        while not self._stopping:
            busy = self.local.working or self.relays.working
            timeout = 0 if busy else self._until_next_cycle(self.now()) * 1000
            ready = dict(poller.poll(timeout))
            self._turn(ready)
        self.close()

    def _turn(self, ready: dict[Any, int]) -> None:
        """One turn of the loop, after the poll: what is ready, then the cycle and timers."""
        watch, clock = self.watch, time.perf_counter
        watch.begin()
        if self.agent_sock in ready:
            since = clock()
            self._drain(self.agent_sock, self._handle_agent)
            watch.add("agents", since)
        if self.offload.fileno() in ready:  # planning done: parked requests step again
            self.offload.collect()
        since = clock()
        self.local.ready(ready, self.now())  # each ready client: one request answered
        watch.add("clients", since)
        since = clock()
        self.local.step_work()  # long requests, a slice per user in turn
        self.local.release_dropped()  # replies cut short: their bodies let go in slices
        self.relays.step_work()  # and those relayed from other nodes
        watch.add("long requests", since)
        now = self.now()
        if self._until_next_cycle(now) <= 0:
            since = clock()
            cycle.run_cycle(self.services, now)
            watch.add("cycle", since)
        for name, every, fn in self.timers:
            if now - self._timer_last[name] >= every:
                self._timer_last[name] = now
                since = clock()
                fn(now)
                watch.add(name, since)
        watch.end()

    def _health(self, now: float) -> None:
        """Every second: the leader lease, silent nodes, what schedd enforces itself."""
        if self.lease is not None and not self.lease.held():
            log.error("lost the leader lease (database session ended): stopping so that a "
                      "standby can lead")
            self._stopping = True
            return
        ctx = self.services
        health.check_nodes(ctx, now)
        enforcement.tick(ctx, now)  # lowered time limits, spent budgets, stalled stops
        ctx.mail.tick(self.state, now)  # TIME_LIMIT_N, remembered in the ledger

    def _until_next_cycle(self, now: float) -> float:
        return self.services.pace.until_next(self.cfg.scheduler, now)

    def stop(self, *_: Any) -> None:
        self._stopping = True

    def close(self) -> None:
        self.collector.close()
        self.offload.close()
        if self.keyring is not None:
            self._auth.stop()
        self.state.usage.save(self.state.store, self.now(), force=True)
        if self.services.metrics is not None:
            self.services.metrics.close()
        self.local.close()
        self.agent_sock.close(0)
        self.ctx.term()
        self.state.store.close()

    def _drain(self, sock: zmq.Socket, handle: Callable[[list[zmq.Frame]], None]) -> None:
        for _ in range(MAX_BATCH):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            handle(frames)

    def _handle_client(self, frame: bytes, caller: Caller) -> bytes:
        return self._dispatch(frame, operations.CLIENT_OPS, CLIENT_HANDLERS, caller)

    def _handle_agent(self, frames: list[zmq.Frame]) -> None:
        node = frames[0].bytes.decode(errors="replace")
        if self.keyring is not None:
            key = (frames[-1].get("User-Id") or "").encode()
            if self.keyring.node_of(key) != node:  # a valid key, but another node's
                owner = self.keyring.node_of(key)
                if self.keyring.refusals is not None:
                    self.keyring.refusals.warning(f"{node}/{owner}", "agent %r presented the "
                                                  "key of %r: refused", node, owner)
                node = None
        route = [f.bytes for f in frames[:-1]]
        reply = self._dispatch(frames[-1].bytes, operations.AGENT_OPS, AGENT_HANDLERS, node,
                               denied="this agent's CURVE key is not its node's", route=route)
        if reply is not None:  # None: a relay op, answered by schedd/relay.py
            self.agent_sock.send_multipart([*route, reply])

    def _relay(self, route: list[bytes], msg_id: Any, op: str, body: dict[str, Any],
               node: str) -> bytes | None:
        """A relay op of an agent: a command of its node (``relay``), the next chunk of a
        reply (``relay_next``), a relay-only agent's hello. The relayed identity is taken
        only as ``Relays.caller`` allows; the inner request is dispatched as a local one."""
        try:
            if op == "relay":
                caller = self.relays.caller(node, self.keyring is not None, body)
            else:
                self.relays.check_node(node, self.keyring is not None, body)
        except RelayError as exc:
            return protocol.reply_error(msg_id, protocol.E_PERMISSION, str(exc))
        if op == "relay_hello":
            return protocol.reply_ok(msg_id, {"heartbeat_interval": self.cfg.heartbeat_interval})
        if op == "relay_next":
            self.relays.next_chunk(route, msg_id, node, body["handle"])
            return None
        inner = body["request"].encode("utf-8", "surrogateescape")
        answer = self._dispatch(inner, operations.CLIENT_OPS, CLIENT_HANDLERS, caller)
        if isinstance(answer, Work):
            self.relays.add(Pending(route, msg_id, node, caller, answer))
        else:
            self.relays.answer(route, msg_id, node, answer)
        return None

    def _act_for(self, msg_id: Any, body: dict[str, Any], relay: Caller, nested: bool) -> Any:
        """kiln restd's request for one of its HTTP callers: the identity only as
        ``restrelay.caller`` allows (a verified token, or a listed relay's local peer); the
        inner request is dispatched as a local one of that caller, never act_for again."""
        if nested:
            return protocol.reply_error(msg_id, protocol.E_BAD_REQUEST,
                                        "act_for may not be nested")
        try:
            caller = restrelay.caller(self.cfg, relay, body, self.now())
        except restrelay.ActForError as exc:
            return protocol.reply_error(msg_id, exc.code, exc.message)
        inner = body["request"].encode("utf-8", "surrogateescape")
        return self._dispatch(inner, operations.CLIENT_OPS, CLIENT_HANDLERS, caller,
                              nested=True)

    def _dispatch(self, frame: bytes, ops: dict, handlers: dict, caller: Any,
                  denied: str = "caller identity unknown",
                  route: list[bytes] | None = None, nested: bool = False) -> Any:
        try:  # decoded once: its id goes on a refusal's error reply too
            msg: dict[str, Any] | None = protocol.decode(frame)
        except protocol.ProtocolError as exc:
            msg, malformed = None, exc
        msg_id = _sane_id(msg)
        try:
            if caller is None:
                raise protocol.ProtocolError(protocol.E_PERMISSION, denied)
            if msg is None:
                raise malformed
            msg_id, op, body = protocol.check_request(msg, ops)
            if route is not None and op in RELAY_OPS:
                return self._relay(route, msg_id, op, body, caller)
            if op == "act_for" and handlers is CLIENT_HANDLERS:
                return self._act_for(msg_id, body, caller, nested)
            if op not in handlers:  # in the wire contract, not (yet) served by this schedd
                raise protocol.ProtocolError(protocol.E_UNKNOWN_OP,
                                             f"operation {op!r} is not supported by this schedd")
            since = time.perf_counter()
            answer = handlers[op](self.services, caller, body)
            if self.watch.on:
                self.watch.add(f"op {op} {_who(caller)}", since)
            if isinstance(answer, GeneratorType):  # a long request: in slices (localsock.Work)
                return Slices(msg_id, answer, self.watch, f"slice {op} {_who(caller)}")
            since = time.perf_counter()
            reply = protocol.reply_ok(msg_id, answer)
            self.watch.add("encode", since)
            return reply
        except protocol.ProtocolError as exc:
            return protocol.reply_error(msg_id, exc.code, exc.message)
        except RequestError as exc:
            return protocol.reply_error(msg_id, exc.code, exc.message)
        except Exception as exc:  # no request may take the daemon down
            log.exception("request failed")
            return protocol.reply_error(msg_id, protocol.E_INTERNAL,
                                        f"internal error: {type(exc).__name__}")


class Slices(Work):
    """A handler written as a generator: it yields after each bounded slice of its work and
    returns its reply body (schedd/handlers/sacct.py); the reply is then streamed, encoded a
    piece at a time as the client reads (``slicing.stream_reply``, which consumes the body's
    long lists: a body must be the request's own, never state's; ``localsock.Stream``).
    Errors end it as _dispatch's would."""

    def __init__(self, msg_id: Any, gen: Generator[Any, None, dict[str, Any]],
                 watch: LoopWatch | None = None, name: str = "slice"):
        self.msg_id, self.gen = msg_id, gen
        self.watch, self.name = watch or LoopWatch(None), name
        self.ticket: offload.Ticket | None = None  # what it waits on off the loop, if any

    @property
    def parked(self) -> bool:
        """Waiting for the worker (it yielded an ``offload.Ticket`` not yet done)."""
        return self.ticket is not None and not self.ticket.done

    def cancel(self) -> None:
        if self.ticket is not None:
            self.ticket.cancelled = True

    @property
    def light(self) -> bool:
        return self.gen.gi_code in slicing.LIGHT

    def step(self) -> Reply | None:
        since = time.perf_counter()
        try:
            try:
                signal = next(self.gen)
                self.ticket = signal if isinstance(signal, offload.Ticket) else None
            except StopIteration as done:  # the body: encoded as the client reads it
                body = done.value
                return Stream(self._encoded(slicing.stream_reply(self.msg_id, body)),
                              lambda made: slicing.pieces_left(body, made), body)
            return None
        except (protocol.ProtocolError, RequestError) as exc:
            return protocol.reply_error(self.msg_id, exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 - no request may take the daemon down
            log.exception("request failed")
            return protocol.reply_error(self.msg_id, protocol.E_INTERNAL,
                                        f"internal error: {type(exc).__name__}")
        finally:
            self.watch.add(self.name, since)

    def _encoded(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        """The stream's pieces, each one's encoding timed in the loop watch."""
        while True:
            since = time.perf_counter()
            piece = next(pieces, None)
            self.watch.add("encode", since)
            if piece is None:
                return
            yield piece


def _lead(cfg: kconfig.Config) -> leader.LeaderLease | None:
    """Stand by until this schedd holds the leader lease; None if told to stop meanwhile."""
    lease = leader.LeaderLease(cfg.db_url, cfg.cluster_name)
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    started = time.time()
    if not lease.wait(lambda: bool(stop)):
        return None
    log.info("leader lease taken after %.1f s: this schedd leads", time.time() - started)
    return lease


def _who(caller: Any) -> str:
    """A caller, for the loop watch: a client's uid, an agent's node."""
    uid = getattr(caller, "uid", None)
    return f"uid {uid}" if uid is not None else f"node {caller}"


def _sane_id(msg: dict[str, Any] | None) -> Any:
    """The id of a request, if it has a usable one (for a refusal's reply)."""
    msg_id = msg.get("id") if msg is not None else None
    return msg_id if isinstance(msg_id, (int, str)) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="schedd", description="kiln's controller daemon")
    parser.add_argument("-f", "--config", help="kiln.toml (default: $KILN_HOME/kiln.toml)")
    parser.add_argument("--log-file", help="log here instead of stderr")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--client-endpoint", help="listen for clients here (a second schedd "
                        "of an HA pair), instead of the config's client_endpoint")
    parser.add_argument("--agent-endpoint", help="listen for agents here, instead of the "
                        "config's agent_endpoint")
    args = parser.parse_args(argv)
    try:
        cfg = kconfig.load(args.config)
        cfg.client_endpoint = args.client_endpoint or cfg.client_endpoint
        cfg.agent_endpoint = args.agent_endpoint or cfg.agent_endpoint
        statedir.secure(cfg)  # umask 077, state dir root-only, no readable password
        setup_logging(args.log_file, args.log_level.upper())
        # alembic's INFO lines (plugin set-up, "Context impl ...") say nothing to an operator
        # of a ledger schedd only checks; its warnings and errors still come through
        logging.getLogger("alembic").setLevel(logging.WARNING)
        lease = _lead(cfg) if cfg.ha else None
        if cfg.ha and lease is None:
            return 0  # stopped while standing by
        daemon = Daemon(cfg)
        daemon.lease = lease
    except (kconfig.ConfigError, SchemaError, keys.KeyFileError, leader.LeaseError) as exc:
        print(f"schedd: error: {exc}", file=sys.stderr)
        return 1
    except (zmq.ZMQError, OSError) as exc:
        print(f"schedd: error: cannot listen: {getattr(exc, 'strerror', None) or exc}",
              file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, daemon.stop)
    signal.signal(signal.SIGINT, daemon.stop)
    daemon.collector.start()  # full collections scan only what is new (schedd/collector.py)
    daemon.run()
    log.info("schedd stopped (pid %d)", os.getpid())  # a clean exit, status 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
