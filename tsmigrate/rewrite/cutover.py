"""The cut-over: which table services on the model API write, moved under a fence.

Tablestore has no rename, so no table swap makes a cut-over atomic; the model API does
(``tsmigrate.service.routing``): every ``Rows`` reads the rewrite's phase under a lease and
writes the side it names. ``switch`` moves that side from the source to the target:

1. Before the fence: capture catches up and the whole target is verified; rows written to the
   target by anything but capture (the wrong side) refuse the switch unless accepted. The target's
   stream is turned on for reverse capture.
2. ``switching`` is recorded: the fence. A process that reads it holds its writes and, once its
   writes in flight landed, acknowledges in its heartbeat row.
3. The switch waits until every live client acknowledged, or the lease (plus a margin) ran out:
   after that no process can still write the source unseen.
4. Capture drains the source's stream; the rows it changed since verification are verified again.
5. ``switched`` is recorded with the start of reverse capture (the target's stream, applied to the
   source with the same per-cell rule), so readers of the old table keep seeing every write and a
   revert loses nothing. Held writes go on, to the target.

``revert`` is the same fence the other way (until ``finish``); forward capture resumes. A kill
at any point leaves ``switching`` or ``reverting``: the next ``switch`` or ``revert`` finishes or
undoes it. ``follow`` hands its lease over for the fence and then captures in the direction the
phase names.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tsmigrate.contract import routes
from tsmigrate.contract.staterow import RewriteJob
from tsmigrate.instance.rawclient import RawClient
from tsmigrate.rewrite import capture as capture_mod
from tsmigrate.rewrite import late, machine, prepare
from tsmigrate.rewrite.reverse import live_clients, make_reverse_capture, save_reverse

FENCE_MARGIN_S = 0.5  # past the lease: a write sent just before it ran out has landed
# A rewrite created before ``created_server_ms`` was kept tells when only by its creator's clock
# (``created_ms``): trusted within this of the service's (every other time the fence compares is
# the service's own).
SKEW_S = 5.0
# The most a switch or revert waits for capture to reach the end of its stream before it raises
# its fence (then drains only what came meanwhile, with writes held)
CATCH_UP_S = 60.0
DRAIN_S = 30.0  # the most the fence holds writes while capture drains what is left
FENCE_STEP_S = 0.25  # a capture round while the fence waits for clients (it polls between rounds)
FENCE_LEASE_S = 15.0  # the runner's lease once the fence is up: a killed switch is taken over soon

Report = Callable[[str, dict[str, Any]], None]


class WrongSideWrites(machine.RewriteError):
    """Rows of the target were written before the switch by something other than capture."""


def enable_target_stream(client: Any, runner: machine.Runner, job: RewriteJob) -> None:
    """The target's stream, for reverse capture (its origin columns: what the source key is built
    from beyond the target key)."""
    if runner.rewrite.get("target_stream_was") is not None:
        return
    from tsmigrate.contract import transform

    backward = transform.RowTransform.build(job.target, job.source)
    was = prepare.enable_stream(RawClient(client), job.target.name, sorted(backward.key_sources))
    runner.save(target_stream_was=was)


def widen_source_deviation(client: Any, runner: machine.Runner, job: RewriteJob) -> None:
    """The source's ``max_time_deviation`` widened for reverse capture, which writes cells with
    their own timestamps into it (a whole row, into a table that takes no UpdateRow, or a row
    that moved to another key): old cells must not be refused. Finish and abort put it back."""
    if runner.rewrite.get("source_declared_deviation") is not None:
        return
    declared = job.source.options.max_time_deviation
    runner.save(source_declared_deviation=declared)
    prepare.set_deviation(client, job.source, max(prepare.wide_deviation(job.source, declared),
                                                  prepare.wide_deviation(job.target, declared)))


# --- the fence ---------------------------------------------------------------------------------


def _verify_keys(client: Any, job: RewriteJob, keys: Iterable[tuple]) -> list[str]:
    """Source keys whose target row is not exactly the transform of the source row."""
    from tsmigrate.contract import transform
    from tsmigrate.rewrite import copy

    keys = list(keys)
    if not keys:
        return []
    t = transform.build(job)
    sources = capture_mod.read_rows(client, job.source.name, keys, copy.versions(job))
    expected = {k: t.apply(list(k), row) for k, row in sources.items()}
    targets = capture_mod.read_rows(client, job.target.name,
                                    [tuple(map(tuple, e.primary_key)) for e in expected.values()],
                                    job.target.options.max_versions)
    differ = []
    for key, row in expected.items():
        got = targets.get(tuple(map(tuple, row.primary_key)))
        if got is None or {c[0]: c[1] for c in got} != {c[0]: c[1] for c in row.columns}:
            differ.append(transform.format_key(key))
    return differ


def wait_for_clients(client: Any, runner: machine.Runner, step: Callable[[], Any],
                     report: Report) -> dict[str, Any]:
    """Until every live client acknowledged the fence (its heartbeat saw this version or later)
    or the lease ran out since the fence went up; ``step`` keeps capture going meanwhile.

    Every time here is the service's (``tsmigrate.instance.clock``), not a host's: "now" is the
    service's time at the start (a cell written and read back) plus this host's monotonic clock
    since, which never runs ahead of it; a heartbeat's age is now minus the timestamp the service
    gave its cells. A process writes on a route only within its lease of a heartbeat the service
    stamped before it read that route (``tsmigrate.service.routing.Router._read_op``): one whose
    newest heartbeat is older than its lease (plus ``FENCE_MARGIN_S``) holds no route read before
    the fence, and one whose heartbeat is younger is waited for, whatever its clock says. The
    fence is up since before the start, so lease + margin past the start no route read before it
    is trusted.
    Clients waited for that never acknowledged are listed as unacknowledged."""
    from tsmigrate.instance import clock

    rewrite = runner.rewrite
    lease = float(rewrite.get("routing_lease_s") or routes.LEASE_S)
    lease = max(lease, float(rewrite.get("previous_lease_s") or 0))  # routes read under the old one
    start_ms, started = clock.server_now_ms(client), time.monotonic()

    def now_ms() -> int:
        return start_ms + int((time.monotonic() - started) * 1000)

    trusted_ms = int((lease + FENCE_MARGIN_S) * 1000)
    deadline_ms = start_ms + trusted_ms
    # A process whose last read predates the rewrite has no heartbeat row yet: acknowledgements
    # can end the wait only once any such read has run out. When the rewrite was created is the
    # service's time read just after (``created_server_ms``); a rewrite created before that was
    # kept has only its creator's clock (``created_ms``), trusted within SKEW_S of the service's.
    created_ms = (int(rewrite.get("created_server_ms") or 0)
                  or int(rewrite.get("created_ms") or 0) + int(SKEW_S * 1000))
    unseen_ms = min(start_ms, created_ms) + trusted_ms
    version = int(rewrite.get("fence_version") or rewrite.version)
    waited: dict[str, dict[str, Any]] = {}  # clients waited for, by id: their newest row
    saved = time.monotonic()
    while True:
        now = now_ms()
        rows = live_clients(client, rewrite.target, now_ms=now)
        pending = [c for c in rows if int(c.get("seen_version", -1)) < version
                   and c["age_s"] < float(c.get("lease_s") or lease) + FENCE_MARGIN_S]
        pending_ids = {c["id"] for c in pending}
        waited.update({c["id"]: c for c in rows if c["id"] in waited or c["id"] in pending_ids})
        if (not pending and now >= unseen_ms) or now >= deadline_ms:
            break
        step()
        if time.monotonic() - saved > 1.0:
            runner.save()  # the fence's short runner lease stays ours while we wait
            saved = time.monotonic()
        time.sleep(routes.POLL_S)
    rows = live_clients(client, rewrite.target, now_ms=now_ms())
    waited.update({c["id"]: c for c in rows if c["id"] in waited})
    acknowledged = [c for c in rows if int(c.get("seen_version", -1)) >= version]
    unacknowledged = [c for c in waited.values() if int(c.get("seen_version", -1)) < version]
    report("fence", {"acknowledged": len(acknowledged), "unacknowledged": unacknowledged})
    return {"acknowledged": len(acknowledged),
            "unacknowledged": [f"{c.get('host')}:{c.get('pid')}" for c in unacknowledged]}


def revert_problem(job: RewriteJob) -> str | None:
    """Why rows services write to the target after the switch could not be carried back to the
    source (None: they can): known from the two tables' declarations (``shapes``)."""
    from tsmigrate.contract import shapes

    return shapes.revert_problem(job.source, job.target, job.custom)


ASKED_NO_REVERT = "switched with --no-revert"


def switch(client: Any, spec: Any, runner: machine.Runner, *, lease_s: float | None = None,
           accept_target_writes: bool = False, no_revert: bool = False,
           report: Report) -> machine.Rewrite:
    """Move the side of record to the target (see the module docstring). ``no_revert``: without
    reverse capture (the source stays as it was at the switch, revert is refused), which a
    rewrite whose new rows cannot give the old key (``revert_problem``) requires."""
    from tsmigrate.rewrite import driver

    rewrite = runner.rewrite
    job = driver.job_of(rewrite)
    if rewrite.phase == machine.SWITCHED:
        return rewrite  # a rerun: already switched (the command says so)
    if rewrite.phase == machine.REVERTING:  # a killed revert: the target is still the side of record
        return _lower(client, runner, machine.SWITCHED, report)
    if rewrite.phase == machine.READY:
        problem = revert_problem(job)
        if problem and not no_revert:
            raise machine.RewriteError(
                f"switch refused: revert after switch is not possible: {problem}. "
                f"`tsmigrate rewrite switch {job.target.name} --no-revert` switches without "
                f"reverse capture: {job.source.name} stays as it is at the switch, revert is "
                "refused, finish as usual"
            )
        capture = driver.make_capture(client, runner.rewrite)

        def catch_up() -> float:
            return driver.catch_up(runner, capture, report, within_s=CATCH_UP_S, what="switch")

        waited = {"catch_up_s": catch_up()}
        if late.watching(rewrite) == rewrite.target:
            # Since a revert: late writes to the target go to the source first, where capture
            # and verification see them as the source's own (after capture's own writes to the
            # target, which the net then need not read again under the fence).
            started = time.monotonic()
            late.settle(client, runner, report, other=catch_up, within_s=CATCH_UP_S)
            waited["late_net_s"] = time.monotonic() - started
            refused = late.set_aside_error(runner.rewrite, "switch refused")
            if refused is not None:
                raise refused
        refused = machine.set_aside_error(runner.rewrite, machine.FORWARD, "switch refused")
        if refused is not None:
            raise refused
        started = time.monotonic()
        check_target(client, spec, runner, capture, accept_target_writes, report)
        waited["verify_s"] = time.monotonic() - started
        if not no_revert:
            enable_target_stream(client, runner, job)
            widen_source_deviation(client, runner, job)
        waited["catch_up_s"] += catch_up()  # what came while verification read: the fence's drain
        before = {name: round(seconds, 3) for name, seconds in waited.items()}
        report("before-fence", before)
        previous = float(rewrite.get("routing_lease_s") or routes.LEASE_S)
        runner.save(phase=machine.SWITCHING, fence_ms=machine.now_ms(),
                    routing_lease_s=float(lease_s or previous), previous_lease_s=previous,
                    fence_version=runner.rewrite.version + 1, error=None, before_fence=before,
                    no_revert=(problem or ASKED_NO_REVERT) if no_revert else None)
        late.fence_raised(client, runner)
    elif rewrite.phase != machine.SWITCHING:
        raise driver.not_ready(rewrite, "switch needs phase ready")
    runner.lease_s = FENCE_LEASE_S
    fence_ms = int(runner.rewrite.get("fence_ms") or machine.now_ms())
    with _lowered_on_failure(runner, machine.SWITCHING, machine.READY, "switch"):
        return _switch_fenced(client, runner, job, fence_ms, report)


def _switch_fenced(client: Any, runner: machine.Runner, job: RewriteJob, fence_ms: int,
                   report: Report) -> machine.Rewrite:
    """The switch under its fence: wait for the clients, drain, verify, record ``switched``."""
    from tsmigrate.rewrite import driver

    capture = driver.make_capture(client, runner.rewrite)
    changed = capture.record()  # verified again once drained
    started = time.monotonic()
    acks = wait_for_clients(client, runner, lambda: capture.step(FENCE_STEP_S), report)
    acks["clients_s"] = round(time.monotonic() - started, 3)
    acks["drain_s"] = round(driver.catch_up(runner, capture, report, within_s=DRAIN_S,
                                            what="switch, under its fence"), 3)
    refused = machine.set_aside_error(runner.rewrite, machine.FORWARD, "switch refused")
    if refused is not None:
        runner.save(phase=machine.READY, error=str(refused)[:2000], previous_lease_s=None,
                    fence=_fence_down(fence_ms, machine.SOURCE))
        raise refused
    differ = _verify_keys(client, job, changed)
    if differ:
        runner.save(phase=machine.READY, error=f"switch: {len(differ)} row(s) differ after the fence",
                    previous_lease_s=None, fence=_fence_down(fence_ms, machine.SOURCE))
        raise machine.RewriteError(
            f"switch: {len(differ)} row(s) of {job.target.name} differ from {job.source.name} after "
            f"capture drained (first: {'; '.join(differ[:5])}); writes go on to {job.source.name}. "
            f"`tsmigrate rewrite status {job.target.name}` shows the rewrite"
        )
    reverse = None
    if not runner.rewrite.get("no_revert"):
        enable_target_stream(client, runner, job)  # on since before the fence, unless that was lost
        if late.watching(runner.rewrite) == job.target.name:
            # Since a revert the net read the target's stream, until past any acknowledged late
            # write (settled before the fence); under the fence only capture wrote it: reverse
            # capture starts at its end.
            reverse = prepare.capture_start(RawClient(client), job.target.name)
        else:  # a second switch goes on from where the revert drained reverse capture
            reverse = (runner.rewrite.get("reverse_capture")
                       or prepare.capture_start(RawClient(client), job.target.name))
    net = late.begin(client, runner, job.source.name, runner.rewrite.doc["capture"])
    held_ms = machine.now_ms() - fence_ms
    return runner.save(phase=machine.SWITCHED, switched_ms=machine.now_ms(), reverse_capture=reverse,
                       fence={**acks, "held_ms": held_ms, "to": machine.TARGET,
                              **_before(runner.rewrite)},
                       previous_lease_s=None, late_net=net, late_lag_s=None)


def _before(rewrite: machine.Rewrite) -> dict[str, Any]:
    """How long the command waited before its fence (``before_fence``), for the fence record."""
    return {f"before_{name}": seconds for name, seconds in (rewrite.get("before_fence") or {}).items()}


def _fence_down(fence_ms: int, to: str) -> dict[str, Any]:
    """The fence record of a fence lowered back where it came from."""
    return {"to": to, "held_ms": machine.now_ms() - fence_ms, "acknowledged": 0,
            "unacknowledged": [], "lowered_after_failure": True}


@contextlib.contextmanager
def _lowered_on_failure(runner: machine.Runner, fenced: str, back: str, command: str) -> Iterator[None]:
    """A fence is lowered by the command that raised it when that command fails: back to the
    side of record before it (``back``), where nothing was written meanwhile (services held),
    so an error never holds every service's writes. A kill leaves the fence for the next
    command, and a rewrite another process took over is that process's."""
    try:
        yield
    except (machine.RewriteConflict, machine.Interrupted):
        raise
    except Exception as exc:
        lowered = False
        with contextlib.suppress(Exception):
            current = machine.refresh(runner.client, runner.rewrite)
            if current.phase == fenced:
                runner.rewrite = current
                fence_ms = int(current.get("fence_ms") or machine.now_ms())
                side = machine.SOURCE if back == machine.READY else machine.TARGET
                runner.save(phase=back, previous_lease_s=None, fence=_fence_down(fence_ms, side),
                            error=f"{command} failed under the fence, which was lowered: {exc}"[:2000])
                lowered = True
        if not lowered or isinstance(exc, machine.RewriteError):
            raise
        rewrite = runner.rewrite
        writes = rewrite.source if back == machine.READY else rewrite.target
        raise machine.RewriteError(
            f"{command} failed under its fence ({type(exc).__name__}: {exc}); the fence was lowered "
            f"and services on the model API write {writes} again. Fix the cause, then run "
            f"`tsmigrate rewrite {command} {rewrite.target}` again"
        ) from exc


def revert(client: Any, runner: machine.Runner, *, report: Report) -> machine.Rewrite:
    """Move the side of record back to the source, losing none of the target's writes."""
    from tsmigrate.rewrite import driver

    rewrite = runner.rewrite
    if rewrite.phase == machine.SWITCHING:  # a killed switch: nothing was written to the target
        held_ms = machine.now_ms() - int(rewrite.get("fence_ms") or machine.now_ms())
        return runner.save(phase=machine.READY, previous_lease_s=None,
                           fence={"to": machine.SOURCE, "held_ms": held_ms, "acknowledged": 0,
                                  "unacknowledged": []})
    if rewrite.phase == machine.SWITCHED:
        reason = rewrite.get("no_revert")
        if reason:
            raise machine.RewriteError(
                f"revert is not possible: {reason}; reverse capture was off since the switch, so "
                f"{rewrite.source} lacks every write made since. "
                f"`tsmigrate rewrite finish {rewrite.target}` ends the rewrite on {rewrite.target}"
            )
        # Reverse capture reaches the stream's end before the fence (the fence then drains only
        # what came meanwhile), and what it set aside refuses the revert before any write is held.
        before = {"catch_up_s": round(driver.drain_reverse(client, runner, report, within_s=CATCH_UP_S,
                                                           what="revert"), 3)}
        report("before-fence", before)
        refused = machine.set_aside_error(runner.rewrite, machine.REVERSE, "revert refused")
        if refused is not None:
            raise refused
        runner.save(phase=machine.REVERTING, fence_ms=machine.now_ms(), before_fence=before,
                    fence_version=runner.rewrite.version + 1)
        late.fence_raised(client, runner)
    elif rewrite.phase != machine.REVERTING:
        raise machine.RewriteError(
            f"the rewrite into {rewrite.target} is {rewrite.phase}; revert needs phase switched "
            "(before finish)"
        )
    return _lower(client, runner, machine.READY, report)


def _lower(client: Any, runner: machine.Runner, to: str, report: Report) -> machine.Rewrite:
    """Lower a revert's fence: to ``ready`` (finish it) or back to ``switched`` (undo it).
    Failing, it goes back to ``switched``: the target is still the side of record."""
    runner.lease_s = FENCE_LEASE_S
    with _lowered_on_failure(runner, machine.REVERTING, machine.SWITCHED, "revert"):
        return _lower_fenced(client, runner, to, report)


def _lower_fenced(client: Any, runner: machine.Runner, to: str, report: Report) -> machine.Rewrite:
    from tsmigrate.rewrite import driver

    capture = make_reverse_capture(client, runner.rewrite)
    fence_ms = int(runner.rewrite.get("fence_ms") or machine.now_ms())
    started = time.monotonic()
    acks = wait_for_clients(client, runner, lambda: capture.step(FENCE_STEP_S), report)
    acks["clients_s"] = round(time.monotonic() - started, 3)
    acks["drain_s"] = round(driver.catch_up(runner, capture, report, within_s=DRAIN_S, save=save_reverse,
                                            what="revert, under its fence"), 3)
    held_ms = machine.now_ms() - fence_ms
    fence = {**acks, "held_ms": held_ms, "to": machine.SOURCE if to == machine.READY else machine.TARGET,
             **_before(runner.rewrite)}
    refused = machine.set_aside_error(runner.rewrite, machine.REVERSE, "revert refused")
    if to == machine.READY and refused is not None:
        runner.save(phase=machine.SWITCHED, fence={**fence, "to": machine.TARGET},
                    previous_lease_s=None, error=str(refused)[:2000])
        raise refused
    if to == machine.READY:
        # The source changed under reverse capture: verification reads every split again. The
        # net watches the target from where reverse capture drained, until the next switch.
        net = late.begin(client, runner, runner.rewrite.target, capture.position())
        return runner.save(phase=machine.READY, touched_splits=None, reverted_ms=machine.now_ms(),
                           fence=fence, previous_lease_s=None, late_net=net,
                           late_lag_s=None)
    return runner.save(phase=machine.SWITCHED, fence=fence, previous_lease_s=None)


def check_target(client: Any, spec: Any, runner: machine.Runner, capture: capture_mod.Capture,
                 accept: bool, report: Report) -> None:
    """Verify the whole target before the fence: a row capture did not write is a write to the
    wrong side (a service or script writing the new table directly). A row is named so only
    once capture reached the end of the stream and the row still differs (``RowsDiffer``),
    never because capture has not reached it yet (that raises ``CaptureBehind``)."""
    from tsmigrate.rewrite import driver

    try:
        driver.verify_until_stable(client, spec, runner, capture, report, since_ms=None)
    except driver.RowsDiffer as exc:
        verification = runner.rewrite.get("verification") or {}
        blocking = verification.get("first_differences") or []
        if accept and not verification.get("collisions"):
            report("wrong-side", {"rows": blocking})
            return
        raise WrongSideWrites(
            f"{exc}. Rows of {runner.rewrite.target} were changed before the switch by something "
            "other than capture (services on the model API write the source until the switch); "
            "`tsmigrate rewrite switch --accept-target-writes` switches anyway if they are intended"
        ) from None
