"""Wiring: leader election, restart recovery, kopf's watches and the scheduling loop.

:func:`run_operator` is the whole controller as one coroutine (``gangq run`` calls it):

0. with ``webhook.port`` set, serve the admission webhook (:mod:`gangq.operator.webhook`) on
   every replica, leader or standby, from before the election until the end of the shutdown;
   likewise, with ``visibility.port`` set, the pending-workloads API (:mod:`gangq.operator.visibility`),
   which answers from the engine once this replica leads and has recovered;
1. wait for the Lease (``leaderElection``; only the leader runs anything below);
2. ``Controller.recover()``: list the queue configuration, nodes, pods and queued objects, put admitted ones
   back into the engine, queue the rest;
3. start kopf through its embedding API (``kopf.operator``) with an ``OperatorRegistry`` that holds
   only ``@kopf.on.event`` handlers (no progress annotations, no finalizers: kopf writes nothing)
   feeding the controller's inbox — plus, with ``--jobset-controller embedded``, the JobSet
   reconciler's handlers (:func:`gangq.operator.jobset.register`);
4. run the scheduling loop until stopped, the Lease is lost, or kopf exits.

Crash-only: when the scheduling loop fails, the controller shuts down (releasing the Lease, so a
standby takes over at once) and :func:`run_operator` raises :class:`ControllerCrashed`; ``gangq
run`` exits non-zero and its Deployment restarts it, and recovery rebuilds the state from the API.
A leader that loses its Lease stops the same way (:class:`LeadershipLost`).

:class:`OperatorThread` runs the same in a background thread (tests, benchmarks, embedding).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, cast

import kopf

from gangq.integrations.job import JOB
from gangq.operator import jobset
from gangq.operator import streams as streams_mod
from gangq.operator.activation import ActivationWatch
from gangq.operator.config import OperatorConfig
from gangq.operator.controller import Controller
from gangq.operator.kube import Credentials, KubeClient
from gangq.operator.latekinds import LateKinds, new_insights, new_vault
from gangq.operator.leader import LeaseElector
from gangq.operator.leaderpod import LeaderPod
from gangq.operator.translate import WATCHED

if TYPE_CHECKING:
    from gangq.operator.visibility import VisibilityServer
    from gangq.operator.webhook import WebhookServer

log = logging.getLogger(__name__)

JobSetController = Literal["embedded", "external"]


# From the stop signal to the end: the writes in flight, kopf, then the Lease. Within 5 s even
# when the API server is unreachable: a rollout or a node drain waits for the old replica, and
# one that hangs in its retries holds the Lease past the pod's grace period.
SHUTDOWN_SECONDS = 4.0
DRAIN_SECONDS = 2.0


class ControllerCrashed(RuntimeError):
    """The scheduling loop failed; the state it left cannot be trusted (see the module docstring)."""


class LeadershipLost(ControllerCrashed):
    """The Lease was not renewed within its renew deadline: this replica stopped leading. ``gangq
    run`` exits non-zero, as controller-runtime's managers do, so the restart is visible (a
    restart count, an alert) rather than a clean exit that hides an API server in trouble."""


def default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{id(object()) % 100000}"


def build_registry(controller: Controller, credentials: Credentials) -> kopf.OperatorRegistry:
    """A kopf registry whose handlers feed ``controller`` (event handlers only: one handler, registered
    for every watched kind, that queues the raw event under the kind's plural)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> Any:
        return credentials.kopf_connection()

    streams = controller.state.streams

    async def feed(event: kopf.RawEvent, resource: kopf.Resource, **_: Any) -> None:
        obj = event.get("object")
        if isinstance(obj, dict):
            controller.enqueue(resource.plural, event.get("type"), cast(dict[str, Any], obj))
            if resource.plural == "pods":
                streams.delivered("pods", obj)

    async def feed_job(event: kopf.RawEvent, **_: Any) -> None:
        obj = event.get("object")
        if isinstance(obj, dict):
            if controller.gangs.job_matters(event.get("type"), cast(dict[str, Any], obj)):
                controller.enqueue(JOB.plural, event.get("type"), cast(dict[str, Any], obj))
            streams.delivered(JOB.plural, obj)

    for group, version, plural in WATCHED:
        handler = feed_job if plural == JOB.plural else feed
        kopf.on.event(group, version, plural, id=f"gangq-feed-{plural}", registry=registry)(handler)

    # Workloads: only their spec.active switch matters, watched apart (gangq.operator.activation)
    return registry


class _NoDiffBase(kopf.DiffBaseStorage):
    """Event handlers need no diff base; kopf would still deep-copy every object to build one."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


class _NoProgress(kopf.ProgressStorage):
    """Event handlers keep no progress: nothing to fetch or store (and nothing to write)."""

    def fetch(self, *, key: Any, body: Any) -> Any:
        return None

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        return None

    def purge(self, *, key: Any, body: Any, patch: Any) -> None:
        return None

    def touch(self, *, body: Any, patch: Any, value: Any) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return essence


def event_handlers_only(registry: kopf.OperatorRegistry) -> bool:
    """True when the registry has no change-detecting or daemon/timer handlers (ours has none; the
    embedded JobSet reconciler may add some, and then kopf's storages stay as they are)."""
    for attr in ("_changing", "_spawning"):
        sub = getattr(registry, attr, None)
        if sub is None or sub.get_all_handlers():
            return False
    return True


def kopf_settings(registry: kopf.OperatorRegistry | None = None) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    if registry is not None and event_handlers_only(registry):
        settings.persistence.diffbase_storage = _NoDiffBase()
        settings.persistence.progress_storage = _NoProgress()
    settings.posting.enabled = False  # kopf's own k8s Events would be writes we do not budget for
    settings.watching.server_timeout = 600
    settings.watching.connect_timeout = 30
    settings.networking.error_backoffs = (0.2, 0.5, 1, 2, 5)
    return settings


async def _attach_telemetry(controller: Controller, config: OperatorConfig) -> Any:
    """Metrics and the visibility endpoint (``gangq.observability``) on the controller's loop;
    returns the HTTP runner to clean up, or None when observability is off or not installed."""
    if config.metrics_port is None:
        return None
    try:
        from gangq.observability.telemetry import Telemetry
    except ImportError:
        log.info("gangq.observability is not installed: no metrics")
        return None
    try:
        telemetry = Telemetry(controller.engine, ready=controller.recovered.is_set)
        controller.telemetry = telemetry
        controller.client.observer = telemetry.metrics.api_request
        telemetry.metrics.set_leader(True)
        return await telemetry.serve(host=config.metrics_bind, port=config.metrics_port)
    except Exception:
        log.exception("observability failed to start; running without metrics")
        controller.telemetry = None
        controller.client.observer = None
        return None


async def _serve_standby(config: OperatorConfig) -> Any:
    """Health and readiness on the metrics port while this replica waits for the Lease
    (:func:`gangq.observability.http.standby_app`); None when observability is off."""
    if config.metrics_port is None:
        return None
    try:
        from gangq.observability.http import standby_app, start_server
    except ImportError:
        return None
    return await start_server(standby_app(), config.metrics_bind, config.metrics_port)


async def run_operator(
    credentials: Credentials,
    config: OperatorConfig,
    *,
    jobset_controller: JobSetController = "embedded",
    identity: str | None = None,
    stop: asyncio.Event | None = None,
    on_controller: Callable[[Controller], None] | None = None,
    release_lease: Callable[[], bool] = lambda: True,
) -> None:
    """Run the controller until ``stop`` is set (or the Lease is lost); see the module docstring.
    ``release_lease()`` is asked at shutdown whether to give the Lease up (False: like a crash)."""
    stop = stop or asyncio.Event()
    client = KubeClient(credentials, qps=config.api.qps, burst=config.api.burst)
    le = config.leader_election
    elector: LeaseElector | None = None
    loop = asyncio.get_running_loop()
    deadline: float | None = None  # of the shutdown, once it began
    webhook: WebhookServer | None = None
    visibility: VisibilityServer | None = None
    http_runner: Any = None
    keeper: asyncio.Future[Any] | None = None
    pod = LeaderPod.from_env(client)
    labelled = False
    try:
        if pod is not None:  # a container restarted in a crashed leader's pod leads no more
            await pod.mark(False)
        if config.webhook.port:
            from gangq.operator.webhook import start_webhook

            webhook = await start_webhook(config, client)
        if config.visibility.port:
            from gangq.operator.visibility import start_visibility

            visibility = await start_visibility(config, client)
        if le.enable:
            elector = LeaseElector(
                client, le.namespace, le.lease_name, identity or default_identity(),
                duration=le.lease_duration_seconds, renew_interval=le.renew_interval_seconds,
            )
            standby = await _serve_standby(config)
            try:
                if not await elector.acquire(stop):
                    return
            finally:
                if standby is not None:
                    await standby.cleanup()
            # Renewed from the moment it is won: recovering a large cluster takes longer than a Lease.
            keeper = asyncio.ensure_future(elector.keep(stop))
        controller = Controller(client, config)
        if on_controller is not None:
            on_controller(controller)
        http_runner = await _attach_telemetry(controller, config)
        if visibility is not None:
            from gangq.observability.http import engine_source

            visibility.serve(engine_source(controller.engine), ready=controller.recovered.is_set)
        if elector is None:
            await controller.recover()
        else:
            recovering = asyncio.ensure_future(controller.recover())
            lost = asyncio.ensure_future(elector.lost.wait())
            await asyncio.wait([recovering, lost], return_when=asyncio.FIRST_COMPLETED)
            lost.cancel()
            if not recovering.done():  # another replica may lead now: nothing of ours may be written
                recovering.cancel()
                await asyncio.gather(recovering, return_exceptions=True)
                raise LeadershipLost("the leader Lease could not be renewed in time during recovery: stopped, "
                                     "for a restart to stand by or lead again")
            recovering.result()
        if pod is not None:  # the pending-workloads API's Service now routes to this replica
            labelled = await pod.mark(True)
        registry = build_registry(controller, credentials)
        if jobset_controller == "embedded":  # shares the controller's client: its rate limit and metrics
            embedded = jobset.register(registry, client=client, credentials=credentials)
            controller.state.child_controller_settled = embedded.settled
            controller.state.child_jobs_rv = embedded.child_jobs_rv
        kopf_stop = asyncio.Event()
        kopf_ready = asyncio.Event()
        namespaces = list(config.namespaces)
        settings = kopf_settings(registry)
        insights = new_insights()
        vault = new_vault()
        if streams_mod.install():  # kopf's pod and Job streams report how far they have reached us
            streams_mod.CURRENT.set(controller.state.streams)
        kopf_task = asyncio.ensure_future(
            kopf.operator(
                registry=registry,
                settings=settings,
                insights=insights,
                vault=vault,
                standalone=True,  # leadership is the Lease's job
                clusterwide=not namespaces,
                namespaces=namespaces,
                stop_flag=kopf_stop,
                ready_flag=kopf_ready,
                memo=kopf.Memo(controller=controller),
            )
        )
        loop_task = asyncio.ensure_future(controller.run())
        activation_task = asyncio.ensure_future(ActivationWatch(client, controller).run(stop))
        waiters: list[asyncio.Future[Any]] = [kopf_task, loop_task, asyncio.ensure_future(stop.wait())]
        if elector is not None:
            waiters.append(asyncio.ensure_future(elector.lost.wait()))

        async def resync() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kopf_ready.wait(), timeout=30)
            _take_back_signals(stop)
            late_kinds = asyncio.ensure_future(LateKinds(client, registry, settings, insights, vault).run(stop))
            await asyncio.sleep(3.0)
            await controller.resync_queued()
            await late_kinds

        resync_task = asyncio.ensure_future(resync())
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        lease_lost = elector is not None and elector.lost.is_set() and not stop.is_set()
        crash = loop_task.exception() if loop_task.done() and not loop_task.cancelled() else None
        if crash is not None:
            log.critical("the scheduling loop failed: shutting down, for a restart to rebuild the state from the API",
                         exc_info=crash)
        if kopf_task.done() and not stop.is_set():
            exc = kopf_task.exception()
            if exc is not None:
                log.error("kopf stopped unexpectedly: %r", exc)
            else:
                log.info("kopf stopped (signal): shutting down")
        # Our own tasks end first: kopf treats every task still running at its exit as a hung
        # sub-task of its own and waits 5 s for it.
        stop.set()
        deadline = loop.time() + SHUTDOWN_SECONDS
        log.debug("stopping the controller")
        if elector is not None and elector.lost.is_set():
            # Another replica may lead now: nothing more of ours may reach the API server.
            await controller.abandon()
        else:
            await controller.stop(DRAIN_SECONDS)
        mine = [resync_task, activation_task, loop_task, *waiters[1:]]
        for task in mine:
            if not task.done():
                task.cancel()
        await asyncio.gather(*mine, return_exceptions=True)
        log.debug("stopping kopf")
        kopf_stop.set()
        # never raises: kopf's own end is not ours to re-raise
        await asyncio.wait({kopf_task}, timeout=max(0.1, deadline - loop.time() - 0.5))
        if not kopf_task.done():
            kopf_task.cancel()
            await asyncio.gather(kopf_task, return_exceptions=True)
        log.debug("stopped")
        if crash is not None:
            raise ControllerCrashed(f"the scheduling loop failed: {crash!r}") from crash
        if lease_lost:
            raise LeadershipLost("the leader Lease could not be renewed in time: stopped, for a restart to "
                                 "stand by or lead again")
    finally:
        if keeper is not None and not keeper.done():
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        if http_runner is not None:
            with contextlib.suppress(Exception):
                await http_runner.cleanup()
        if pod is not None and labelled and release_lease():
            with contextlib.suppress(TimeoutError):
                left = SHUTDOWN_SECONDS if deadline is None else deadline - loop.time()
                await asyncio.wait_for(pod.mark(False), timeout=max(0.1, left / 2))
        if elector is not None and release_lease():
            log.debug("releasing the lease")
            left = SHUTDOWN_SECONDS if deadline is None else deadline - loop.time()
            try:
                await asyncio.wait_for(elector.release(), timeout=max(0.1, left))
            except TimeoutError:
                log.warning("could not release the Lease in time: a standby takes over when it expires")
        if webhook is not None:  # served to the end: labelled creates keep being suspended meanwhile
            await webhook.stop()
        if visibility is not None:
            visibility.withdraw()
            await visibility.stop()
        log.debug("closing the client")
        await client.close()
        log.debug("closed")


def _take_back_signals(stop: asyncio.Event) -> None:
    """In the main thread kopf takes SIGINT and SIGTERM for its own graceful stop, which waits out
    its API retries; they stop the controller instead, whose shutdown ends kopf within its budget."""
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)


class OperatorThread:
    """:func:`run_operator` on its own event loop in a background thread.

    ``start()`` returns once the thread runs; ``controller`` is set when this replica leads;
    ``stop()`` shuts down cleanly (releasing the Lease); ``kill()`` stops without releasing it,
    like a crashed process.
    """

    def __init__(
        self,
        credentials: Credentials,
        config: OperatorConfig,
        *,
        jobset_controller: JobSetController = "external",
        identity: str | None = None,
    ) -> None:
        self.credentials = credentials
        self.config = config
        self.jobset_controller: JobSetController = jobset_controller
        self.identity = identity or default_identity()
        self.controller: Controller | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._release = True
        self.error: BaseException | None = None

    def start(self) -> OperatorThread:
        def main() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            asyncio.set_event_loop(loop)
            self._stop = asyncio.Event()
            self._started.set()

            def got(c: Controller) -> None:
                self.controller = c

            try:
                loop.run_until_complete(
                    run_operator(self.credentials, self.config, jobset_controller=self.jobset_controller,
                                 identity=self.identity, stop=self._stop, on_controller=got,
                                 release_lease=lambda: self._release)
                )
            except BaseException as err:
                self.error = err
                log.exception("operator thread %s failed", self.identity)
            finally:
                with contextlib.suppress(Exception):
                    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                    for t in pending:
                        t.cancel()
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.close()

        self._thread = threading.Thread(target=main, name=f"gangq-operator-{self.identity}", daemon=True)
        self._thread.start()
        self._started.wait(10)
        return self

    @property
    def leading(self) -> bool:
        c = self.controller
        return c is not None and c.recovered.is_set() and not c.stopping.is_set()

    def stop(self, timeout: float = 20.0) -> None:
        if self.loop is not None and self._stop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def kill(self, timeout: float = 20.0) -> None:
        """Stop like a crash: no Lease release (the standby waits for it to expire)."""
        self._release = False
        self.stop(timeout)

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run ``fn()`` on the operator's loop (e.g. to read the engine) and return its result."""
        assert self.loop is not None

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)
