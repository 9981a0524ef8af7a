"""Drive a rewrite through its phases: what ``apply``, ``rewrite follow``, ``finish``, ``abort``,
``pause`` and ``resume`` do. Each phase continues from what ``tsmigrate_state`` says, so a run
killed at any moment is continued by the next one.

    prepare    prepare.py: sample check, target checked, deviation widened, stream on, capture
               start recorded, splits computed
    backfill   the split tasks (executors) copy rows; capture follows the stream meanwhile,
               keeping records of unfinished splits as their dirty keys
    catch-up   capture drains the stream, then verification compares source and target
               (counts and hashes per split, both directions); differences seen while services
               still write are re-checked after catching up again; collisions stop here
    ready      the target is complete and follows the source; apply returns here
    finishing  capture drained, verification once more, capture stopped, the target's
               max_time_deviation set back, the source's stream put back, the source dropped
               with --allow-destructive
    done
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import attrs
import tablestore as ts

from tsmigrate.instance.rawclient import RawClient
from tsmigrate.rewrite import machine, prepare, shards
from tsmigrate.rewrite.job import ConnectionSpec, RewriteJob
from tsmigrate.rewrite.progress import next_step

if TYPE_CHECKING:
    # Imported where a rewrite runs, not here: plan and apply import this module for its
    # settings, and capture brings the whole copy engine (rows, transforms, writer).
    from tsmigrate.rewrite import capture as capture_mod

CAPTURE_IDLE_S = 0.2  # pause between stream polls when capture is caught up
RECHECK_ROUNDS = 5  # catch-up + re-check rounds for rows that changed during verification
STUCK_ROUNDS = 2  # ...ended early when this many in a row settled none of them
RECHECK_CATCH_UP_S = 60.0  # the most a re-check waits for capture to reach the stream's end
SAVE_EVERY_S = 1.0  # how often the capture position is written while following
HEARTBEAT_S = 20.0  # lease renewal while verification runs (leases last minutes)
ERROR_CHARS = 300  # a capture's error as status shows it
DRAIN_S = 60.0  # the most finish and the cut-over commands wait for a capture to reach its end


@attrs.frozen
class RunOptions:
    workers: int = 4
    dask: str | None = None
    max_rows_per_s: float | None = None


Report = Callable[[str, dict[str, Any]], None]  # (event, data) for progress and status lines


def quiet(event: str, data: dict[str, Any]) -> None:
    return None


def spec_of(client: Any, local_defaults: bool) -> ConnectionSpec:
    """How split workers reach the instance ``client`` talks to: with the local server's
    built-in key when ``local_defaults`` or when ``client`` signs with it (a command pointed at
    the project's `local serve` by its endpoint), else with their environment's."""
    if not local_defaults:
        from tsmigrate.wire.signing import DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET

        signed = client.credentials_provider.get_credentials()
        local_defaults = (signed.get_access_key_id(), signed.get_access_key_secret()) == (
            DEFAULT_ACCESS_KEY_ID, DEFAULT_ACCESS_KEY_SECRET)
    return ConnectionSpec(client.host, client.protocol.instance_name, local_defaults=local_defaults)


def job_of(rewrite: machine.Rewrite) -> RewriteJob:
    return machine.job_of(rewrite)


def _splits(client: Any, rewrite: machine.Rewrite) -> list[Any]:
    from tsmigrate.rewrite import splits

    kept = splits.load(client, job_of(rewrite).id)
    if kept is None:
        raise machine.RewriteError(f"the key ranges of the rewrite into {rewrite.target} are missing")
    return kept


def make_capture(client: Any, rewrite: machine.Rewrite,
                 runner: shards.ShardRunner | None = None) -> capture_mod.Capture:
    """Forward capture, its shards run by ``runner`` (threads, as many as the rewrite's last
    ``--workers``, unless given)."""
    from tsmigrate.contract import transform
    from tsmigrate.rewrite import capture as capture_mod
    from tsmigrate.rewrite import checkpoints, splits, writer

    job = job_of(rewrite)
    split_list = _splits(client, rewrite)
    capture = capture_mod.Capture(
        client, job, transform.build(job), rewrite.doc["capture"],
        split_of=splits.locator(split_list),
        split_done=lambda index: checkpoints.split_done(client, job.id, index),
        writer=writer,
        touched=rewrite.doc.get("touched_splits"),
    )
    # Splits whose copy is done, read once: workers then ask only about the others
    capture.finished_splits.update(c.index for c in checkpoints.list_splits(client, job.id) if c.done)
    return shards.attach(capture, rewrite, "tsmigrate.rewrite.driver:make_capture", job.id, runner)


def _save_capture(runner: machine.Runner, capture: capture_mod.Capture, *,
                  stopped_by: str | None = None, **extra: Any) -> None:
    """Save forward capture's position, stats, lag and when (``capture_at_ms``, what status
    ages); ``stopped_by``: the error that stopped it (``capture_error``; a save without one is
    progress, which clears it)."""
    if capture.touched is not None:  # saved with the position it is true of
        extra["touched_splits"] = sorted(capture.touched)
    runner.save(capture=capture.position(), capture_lag_s=round(capture.lag_s(), 3),
                capture_stats=attrs.asdict(capture.stats), capture_at_ms=machine.now_ms(),
                capture_error=stopped_by, **extra)


@contextlib.contextmanager
def heartbeat(runner: machine.Runner, report: Report, every_s: float = HEARTBEAT_S) -> Iterator[None]:
    """Renew the runner's lease (and, through ``report``, apply's lock) while a long step that
    saves nothing runs (verification)."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            with contextlib.suppress(machine.RewriteError):
                runner.save()
            report("heartbeat", {})

    thread = threading.Thread(target=beat, name="rewrite-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def catch_up(runner: machine.Runner, capture: capture_mod.Capture, report: Report, *,
             within_s: float | None = None, what: str = "catch-up",
             save: Callable[..., Any] | None = None) -> float:
    """Apply rounds until one ends at the end of every shard with nothing waiting (caught up),
    saving the position (``save``: forward capture's unless given); the seconds it took. Given
    ``within_s``, a capture still behind after that long raises ``CaptureBehind``, naming
    its lag and rate (``what`` says which command waited: ``Capture.behind``)."""
    save = save or _save_capture
    started = time.monotonic()
    while True:
        capture.step()
        save(runner, capture)
        report("capture", {"lag_s": capture.lag_s(), **attrs.asdict(capture.stats)})
        waited = time.monotonic() - started
        if capture.stats.caught_up:
            return waited
        if within_s is not None and waited > within_s:
            raise capture.behind(what, within_s)


# --- phases ---------------------------------------------------------------------------------------


def run_backfill(client: Any, spec: ConnectionSpec, runner: machine.Runner, options: RunOptions,
                 report: Report) -> None:
    """Copy every split while capture follows the stream in a thread."""
    from tsmigrate.rewrite import executors

    rewrite = runner.rewrite
    job = attrs.evolve(job_of(rewrite), max_rows_per_s=options.max_rows_per_s)
    split_list = _splits(client, rewrite)
    shard_runner = shards.runner(options.workers, dask=options.dask, spec=spec)
    capture = make_capture(client, rewrite, shard_runner)
    stop = threading.Event()
    failure: list[BaseException] = []

    def follow() -> None:
        last_save = 0.0
        try:
            while not stop.is_set():
                read = capture.step()
                if time.monotonic() - last_save > SAVE_EVERY_S:
                    _save_capture(runner, capture)
                    last_save = time.monotonic()
                if not read:
                    stop.wait(CAPTURE_IDLE_S)
        except BaseException as exc:  # surfaced by the main thread, which stops the copy
            failure.append(exc)
            stop.set()

    def on_progress(progress: Any) -> None:
        if failure:  # paused, aborted or failed meanwhile: stop copying (checkpoints keep it)
            raise failure[0]
        report("backfill", {"progress": progress})

    follower = threading.Thread(target=follow, name="rewrite-capture", daemon=True)
    follower.start()
    executor = (executors.DaskExecutor(options.dask) if options.dask
                else executors.InProcessExecutor(options.workers))
    try:
        result = executors.run_backfill(spec, job, split_list, executor, on_progress)
    finally:
        stop.set()
        follower.join()
        executor.close()
        shard_runner.close()
    if failure:
        raise failure[0]
    _save_capture(runner, capture, backfill={"rows": result.rows, "bytes": result.bytes,
                                              "elapsed_s": round(result.elapsed_s, 3)})
    runner.save(phase=machine.CATCH_UP)


def _newest(cells: Iterable[Any] | None) -> int:
    return max((int(c[2]) for c in cells or ()), default=0)


def _key(key: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((name, value) for name, value in key)


@attrs.frozen
class Recheck:
    """Differences after a re-check: ``accepted`` (equal now, or, at finish, the work of
    services on the new model since ``ready``), ``moving`` (the source row changed while being
    re-checked: undecided), ``blocking`` (a real difference)."""

    accepted: list[str]
    moving: list[str]
    blocking: list[str]


def recheck(client: Any, job: RewriteJob, runner: machine.Runner, capture: capture_mod.Capture,
            differences: list[tuple[Any, Any]], since_ms: int | None, report: Report) -> Recheck:
    """Read the differing source rows, catch capture up, read the target rows and the source
    rows again: a source row that did not change meanwhile must have its exact transform in the
    target (and no stale row at its old target key)."""
    from tsmigrate.contract import transform
    from tsmigrate.rewrite import capture as capture_mod
    from tsmigrate.rewrite import copy

    t = transform.build(job)
    keys = [_key(s) for s, _ in differences if s]
    before = capture_mod.read_rows(client, job.source.name, keys, copy.versions(job))
    catch_up(runner, capture, report, within_s=RECHECK_CATCH_UP_S, what="verification")
    wanted = {_key(tk) for _, tk in differences if tk}
    expected = {}
    for source_key, row in before.items():
        expected[source_key] = t.apply(list(source_key), row)
        wanted.add(_key(expected[source_key].primary_key))
    targets = capture_mod.read_rows(client, job.target.name, list(wanted),
                                    job.target.options.max_versions)
    after = capture_mod.read_rows(client, job.source.name, keys, copy.versions(job))
    result = Recheck([], [], [])
    seen = set()
    for source_key, target_key in differences:
        text = transform.format_key(source_key or target_key)
        if text in seen:
            continue
        seen.add(text)
        if not source_key:
            stale = targets.get(_key(target_key))
            service_row = since_ms is not None and _newest(stale) > since_ms
            (result.accepted if stale is None or service_row else result.blocking).append(text)
            continue
        sk = _key(source_key)
        if before.get(sk) != after.get(sk):
            result.moving.append(text)
            continue
        source_row = after.get(sk)
        new_key = _key(expected[sk].primary_key) if source_row is not None else None
        ok = True
        if new_key is not None:
            got = targets.get(new_key)
            if got != [tuple(c) for c in expected[sk].columns]:
                # At finish, capture has applied every source change, and it never deletes the
                # row of a source row that exists: a missing row was deleted (or moved) by a
                # service on the new model; a different one was written by one after ready.
                ok = since_ms is not None and (got is None or _newest(got) > since_ms)
        if target_key and _key(target_key) != new_key:
            stale = targets.get(_key(target_key))
            if stale is not None and _key(t.source_key_of(list(target_key), stale)) == sk:
                ok = ok and since_ms is not None and _newest(stale) > since_ms
        (result.accepted if ok else result.blocking).append(text)
    return result


def copied_totals(client: Any, job: RewriteJob, capture: capture_mod.Capture) -> dict[int, tuple[int, int]]:
    """Source (rows, digest) of the splits no stream record touched since capture started, as
    their backfill read them: the stream proves those source rows are unchanged since."""
    from tsmigrate.rewrite import checkpoints

    if capture.touched is None:
        return {}
    return {c.index: (c.rows, c.digest) for c in checkpoints.list_splits(client, job.id)
            if c.done and c.index not in capture.touched}


class RowsDiffer(machine.RewriteError):
    """Rows differ after capture reached the end of the stream: not capture's lag."""


def verify_until_stable(client: Any, spec: ConnectionSpec, runner: machine.Runner,
                        capture: capture_mod.Capture, report: Report, since_ms: int | None) -> None:
    """Verify; re-check rows that differ (they may have changed while verification read them).
    Collisions and differences that stay stop the rewrite. ``since_ms`` (at finish): changes
    services on the new model made to the target after that time are accepted."""
    from tsmigrate.rewrite import verify

    rewrite = runner.rewrite
    job = job_of(rewrite)
    with heartbeat(runner, report):
        result = verify.verify(spec, job, _splits(client, rewrite),
                               copied=copied_totals(client, job, capture),
                               target_bytes=(rewrite.get("backfill") or {}).get("bytes"))
    report("verify", {"ok": result.ok})
    differing = {v.index for v in result.per_split if not v.ok}
    if differing and capture.touched is not None:
        # Whatever made them differ, later verifications read these splits' source rows again.
        capture.touched |= differing
        _save_capture(runner, capture)
    if result.collisions:
        listed = "; ".join(str(c) for c in result.collisions[:10])
        runner.save(verification=_verification(result, []))
        raise machine.RewriteError(
            f"{len(result.collisions)} collision(s): several source rows map to one target key, "
            f"so the new key does not identify rows ({listed}). Nothing was overwritten silently; "
            f"fix the key declaration, then `tsmigrate rewrite abort {job.target.name}` and apply"
        )
    if result.ok:
        runner.save(verification=_verification(result, []))
        return
    if result.truncated:
        raise machine.RewriteError(
            f"verification found more differences than it lists ({len(result.differences)}+); "
            f"first: {'; '.join(map(str, result.first_differences[:5]))}"
        )
    todo = [(d.source_key, d.target_key) for d in result.differences]
    accepted: list[str] = []
    checked = Recheck([], [], [])
    stuck = 0  # rounds in a row in which no moving row settled
    for _round in range(RECHECK_ROUNDS):
        checked = recheck(client, job, runner, capture, todo, since_ms, report)
        accepted += checked.accepted
        if checked.blocking:
            break
        if not checked.moving:
            runner.save(verification=_verification(result, accepted))
            return
        moving = set(checked.moving)
        stuck = stuck + 1 if len(moving) >= len(todo) else 0
        if stuck >= STUCK_ROUNDS:
            break  # rows written all the time: more rounds would not pin them down
        todo = [(s, t) for s, t in todo if s and transform_key_text(s) in moving]
        time.sleep(CAPTURE_IDLE_S)
    if not checked.blocking and since_ms is None:
        # Rows services keep changing cannot be pinned down now; finish verifies again once
        # they write the new table.
        runner.save(verification=_verification(result, accepted + checked.moving))
        return
    blocking = checked.blocking or checked.moving
    runner.save(verification=_verification(result, accepted, blocking))
    raise RowsDiffer(
        f"verification: {len(blocking)} row(s) differ between {job.source.name} and "
        f"{job.target.name} after catching up (first: {'; '.join(blocking[:5])}); cut-over is "
        f"blocked. Run `tsmigrate rewrite status {job.target.name}` for details"
    )


def transform_key_text(key: Any) -> str:
    from tsmigrate.contract.transform import format_key

    return format_key(key)


def _verification(result: Any, accepted: list[str], blocking: list[str] = ()) -> dict[str, Any]:
    return {
        "ok": not blocking and not result.collisions,
        "at_ms": machine.now_ms(),
        "rows_source": result.source_rows,
        "rows_target": result.target_rows,
        "splits_from_copy": result.source_from_copy,
        "collisions": [str(c) for c in result.collisions[:20]],
        "changed_meanwhile": len(accepted),
        "first_differences": list(blocking[:10]),
    }


def run_catch_up(client: Any, spec: ConnectionSpec, runner: machine.Runner, options: RunOptions,
                 report: Report) -> None:
    shard_runner = shards.runner(options.workers, dask=options.dask, spec=spec)
    try:
        capture = make_capture(client, runner.rewrite, shard_runner)
        catch_up(runner, capture, report)
    finally:
        shard_runner.close()
    verify_until_stable(client, spec, runner, capture, report, since_ms=None)
    runner.save(phase=machine.READY, ready_ms=machine.now_ms())


def run_to_ready(client: Any, spec: ConnectionSpec, runner: machine.Runner, options: RunOptions,
                 report: Report = quiet) -> machine.Rewrite:
    """Take the rewrite from wherever it is to ``ready`` (what apply does)."""
    rewrite = runner.rewrite
    if rewrite.phase in (machine.PAUSED, machine.FAILED):
        runner.save(phase=rewrite.resume_to, error=None)
    if rewrite.get("capture_workers") != options.workers:
        runner.save(capture_workers=options.workers)  # the cut-over commands capture with as many
    try:
        while True:
            phase = runner.rewrite.phase
            report("phase", {"phase": phase})
            if phase == machine.PREPARE:
                # The copy's throttle is part of how long it takes: prepare checks that.
                job = attrs.evolve(job_of(runner.rewrite), max_rows_per_s=options.max_rows_per_s)
                prepare.prepare(client, spec, runner, job, options.workers)
            elif phase == machine.BACKFILL:
                run_backfill(client, spec, runner, options, report)
            elif phase == machine.CATCH_UP:
                run_catch_up(client, spec, runner, options, report)
            else:
                return runner.rewrite
    except machine.Interrupted:
        raise
    except Exception as exc:
        fail(runner, exc)
        raise


def fail(runner: machine.Runner, exc: BaseException) -> None:
    with contextlib.suppress(Exception):
        current = machine.refresh(runner.client, runner.rewrite)
        if current.phase in machine.RUNNING_PHASES:
            runner.rewrite = current
            runner.save(phase=machine.FAILED, error=str(exc)[:2000])


def follow(client: Any, runner: machine.Runner, seconds: float | None, report: Report = quiet,
           stop: threading.Event | None = None, shard_runner: shards.ShardRunner | None = None) -> None:
    """Keep capture running for ``seconds`` (None: until interrupted or finished): the source's
    changes into the target while the source is the side of record (ready), the target's into the
    source once switched. A switch, revert or finish asks for the lease: follow hands it over,
    waits for the fence to come down, and goes on in the direction the phase then names.
    ``stop``: set by another thread to end it (a process that embeds follow). ``shard_runner``:
    who applies the stream shards (``--workers`` / ``--dask``; threads as the rewrite's last
    ``--workers`` unless given)."""
    deadline = None if seconds is None else time.monotonic() + seconds

    def over() -> bool:
        return (deadline is not None and time.monotonic() >= deadline) or (
            stop is not None and stop.is_set())

    if runner.rewrite.phase not in (machine.READY, machine.SWITCHED):
        raise not_ready(runner.rewrite, "follow runs in phase ready or switched")
    while not over():
        captures = _captures(client, runner.rewrite, shard_runner)
        if captures:
            _follow(runner, captures, over, report)
        else:
            _idle(runner, over)  # switched --no-revert before the net existed: nothing to carry
        if over():
            return
        phase = runner.rewrite.phase
        if phase not in (machine.READY, machine.SWITCHED, machine.SWITCHING, machine.REVERTING):
            report("follow-ended", {"phase": phase})
            return  # finishing, done, aborted, paused: not follow's to go on with
        runner.release()  # handed over: wait for the other command, then take the lease back
        while not over():
            time.sleep(CAPTURE_IDLE_S)
            current = machine.refresh(client, runner.rewrite)
            lease = current.get("runner") or {}
            if not lease.get("owner") and current.phase in (machine.READY, machine.SWITCHED):
                with contextlib.suppress(machine.RewriteConflict):
                    runner.retake()
                    break
            if current.phase not in (machine.READY, machine.SWITCHED, machine.SWITCHING,
                                     machine.REVERTING):
                runner.rewrite = current
                report("follow-ended", {"phase": current.phase})
                return


def _captures(client: Any, rewrite: machine.Rewrite, shard_runner: shards.ShardRunner | None = None
              ) -> list[tuple[capture_mod.Capture, Callable[..., Any]]]:
    """What ``follow`` runs in the rewrite's phase, each with how its position is saved: forward
    capture (ready) or reverse capture (switched, unless --no-revert), and the late-write net
    watching the side services left (``late``), when there is one."""
    from tsmigrate.rewrite import late, reverse  # not before: they import the service layer

    found: list[tuple[capture_mod.Capture, Callable[..., Any]]] = []
    if rewrite.phase == machine.READY:
        found.append((make_capture(client, rewrite, shard_runner), _save_capture))
    elif not rewrite.get("no_revert"):
        found.append((reverse.make_reverse_capture(client, rewrite, shard_runner), reverse.save_reverse))
    net = late.make(client, rewrite, shard_runner)
    if net is not None:
        found.append((net, late.save))
    return found


def _follow(runner: machine.Runner, captures: list[tuple[capture_mod.Capture, Callable[..., Any]]],
            over: Callable[[], bool], report: Report) -> None:
    """Apply ``captures`` in turn until ``over()``, or until another command wants the rewrite."""
    from tsmigrate.rewrite import capture as capture_mod

    phase = runner.rewrite.phase
    last_save = 0.0
    failed = None
    try:
        while not over():
            read = 0
            for capture, _save in captures:
                if capture is not captures[0][0] and not captures[0][0].stats.caught_up:
                    continue  # the net compares both sides: not while capture lags behind
                failed = capture
                read += capture.step()
            failed = None
            if time.monotonic() - last_save > SAVE_EVERY_S:
                for capture, save in captures:
                    save(runner, capture)
                last_save = time.monotonic()
                if runner.handover_requested or runner.rewrite.phase != phase:
                    break
            first = captures[0][0]
            report("capture", {"lag_s": first.lag_s(), "direction": phase, **attrs.asdict(first.stats)})
            if not read:
                time.sleep(CAPTURE_IDLE_S)
    except BaseException as exc:
        # Whatever stopped it is kept with its position, so status shows this capture stopped
        # and why, not the lag it last had. A pause, abort or takeover is the rewrite's story.
        why = (None if isinstance(exc, (machine.Interrupted, machine.RewriteConflict))
               else (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)[:ERROR_CHARS])
        for capture, save in captures:
            with contextlib.suppress(Exception):
                save(runner, capture, stopped_by=why if capture is failed else None)
        if isinstance(exc, capture_mod.CaptureLost):
            # Kept on the rewrite, so `rewrite status` says why and how to start again.
            with contextlib.suppress(machine.RewriteError):
                runner.save(error=str(exc)[:2000])
        raise
    for capture, save in captures:
        with contextlib.suppress(machine.RewriteError):
            save(runner, capture)


def _idle(runner: machine.Runner, over: Callable[[], bool]) -> None:
    """Hold the rewrite without capturing until ``over()`` or another command wants it."""
    phase = runner.rewrite.phase
    while not over():
        time.sleep(min(SAVE_EVERY_S, CAPTURE_IDLE_S * 5))
        with contextlib.suppress(machine.RewriteError):
            runner.save()  # keeps the lease, and reads what other commands asked
        if runner.handover_requested or runner.rewrite.phase != phase:
            return


def not_ready(rewrite: machine.Rewrite, needs: str) -> machine.RewriteError:
    """A command that needs phase ready: say which phase it is in and what gets it on."""
    if rewrite.phase == machine.FAILED:
        why = f"it failed: {rewrite.get('error') or 'see tsmigrate rewrite status'}"
    else:
        why = f"next: {next_step(rewrite)}"
    return machine.RewriteError(
        f"the rewrite into {rewrite.target} is {rewrite.phase}; {needs} ({why})"
    )


def finish(client: Any, spec: ConnectionSpec, runner: machine.Runner, allow_destructive: bool,
           report: Report = quiet, *, force: bool = False, accept_target_writes: bool = False,
           accept_conflicts: bool = False, declared: Collection[str] = ()) -> machine.Rewrite:
    """End the rewrite: after ``switch`` (the target is the table of record), wait until the
    late-write net read past the fence by more than a request can take (``late.settle``), drain
    reverse capture and stop it; with ``force`` from ready (services that write without the model
    API moved by their own deploy), catch up and verify as the cut-over. Conflicts the net found
    refuse it unless ``accept_conflicts`` (kept as ``conflicts_accepted``). Then put the tables'
    settings back, and drop the old table with ``allow_destructive``, unless it is one of
    ``declared`` (the tables the models declare): then nothing is done."""
    from tsmigrate.rewrite import late

    rewrite = runner.rewrite
    if allow_destructive and rewrite.source in declared:
        # Refused before anything moves: dropping it would take a declared table from its model.
        raise machine.RewriteError(
            f"not dropping {rewrite.source}: the models still declare it. Remove its model (or its "
            f"table= name) first, or finish without --allow-destructive to keep {rewrite.source}"
        )
    if rewrite.phase == machine.DONE:
        # A rerun, or --allow-destructive after a finish that kept the old table.
        if allow_destructive and rewrite.source in client.list_table():
            drop_table(client, rewrite.source)
            return runner.save(source_dropped=True)
        return rewrite
    if rewrite.phase == machine.READY and not force:
        raise machine.RewriteError(
            f"the rewrite into {rewrite.target} is ready, not switched: services on the model API "
            f"still write {rewrite.source}. Run `tsmigrate rewrite switch {rewrite.target}` first; "
            "`finish --force` finishes from ready for services that do not use the model API "
            "(tsmigrate.service Rows/AsyncRows) and were moved by their own deploy"
        )
    if rewrite.phase in (machine.READY, machine.SWITCHED):
        # From ready, finishing is a fence (services hold their writes): since when, for status.
        fence = {"fence_ms": machine.now_ms()} if rewrite.phase == machine.READY else {}
        runner.save(phase=machine.FINISHING, finish_from=rewrite.phase, **fence)
    elif rewrite.phase != machine.FINISHING:
        raise not_ready(rewrite, "finish needs phase ready" if force else "finish needs phase switched")
    came_from = runner.rewrite.get("finish_from") or machine.READY
    job = job_of(runner.rewrite)
    try:
        # Late writes to the side services left are carried first (and, after a revert, are
        # then the source's own for verification).
        late.settle(client, runner, report, other=_writes_watched(client, runner, report))
        refused = late.set_aside_error(runner.rewrite, "finish refused")
        if refused is None and not accept_conflicts:
            refused = late.refusal(client, runner.rewrite, "finish refused", "--accept-conflicts")
        if refused is None and came_from == machine.SWITCHED and not runner.rewrite.get("no_revert"):
            drain_reverse(client, runner, report)
            refused = machine.set_aside_error(runner.rewrite, machine.REVERSE, "finish refused")
        elif refused is None and came_from == machine.READY:
            _verify_forced(client, spec, runner, accept_target_writes, report)
            refused = machine.set_aside_error(runner.rewrite, machine.FORWARD, "finish refused")
        if refused is not None:
            raise refused
    except Exception as exc:
        with contextlib.suppress(Exception):
            runner.save(phase=came_from, error=str(exc)[:2000])
        raise
    if accept_conflicts:
        accepted = late.accept(client, runner.rewrite.target)
        if accepted:
            runner.save(conflicts_accepted=[late.describe(c) for c in accepted][:100])
    declared = runner.rewrite.get("declared_deviation")
    if declared is not None:
        prepare.set_deviation(client, job.target, int(declared))
    raw = RawClient(client)
    was = runner.rewrite.get("stream_was")
    source_exists = job.source.name in client.list_table()
    if was is not None and source_exists and not allow_destructive:
        prepare.restore_stream(raw, job.source.name, was)
    restore_source_deviation(client, runner.rewrite, job, source_exists and not allow_destructive)
    target_was = runner.rewrite.get("target_stream_was")
    if target_was is not None:
        prepare.restore_stream(raw, job.target.name, target_was)
    if allow_destructive and source_exists:
        drop_table(client, job.source.name)
    done = runner.save(phase=machine.DONE, finished_ms=machine.now_ms(),
                       source_dropped=allow_destructive)
    from tsmigrate.rewrite import reverse

    reverse.forget_clients(client, done.target)
    return done


def _writes_watched(client: Any, runner: machine.Runner, report: Report) -> Callable[[], Any] | None:
    """What drains the capture that writes the table the late-write net watches: reverse capture
    after a switch (none with --no-revert), forward capture after a revert."""
    from tsmigrate.rewrite import late

    watched = late.watching(runner.rewrite)
    if watched == runner.rewrite.source and not runner.rewrite.get("no_revert"):
        return lambda: drain_reverse(client, runner, report)
    if watched == runner.rewrite.target:
        return lambda: catch_up(runner, make_capture(client, runner.rewrite), report, within_s=DRAIN_S,
                                what="the late-write net's drain")
    return None


def drain_reverse(client: Any, runner: machine.Runner, report: Report, *,
                  within_s: float | None = DRAIN_S, what: str = "finish") -> float:
    """Apply the target's last changes to the old table, which readers may still read, until
    reverse capture reached the end of the target's stream (``catch_up``); the seconds it took."""
    from tsmigrate.rewrite import reverse

    capture = reverse.make_reverse_capture(client, runner.rewrite)
    return catch_up(runner, capture, report, within_s=within_s, what=what, save=reverse.save_reverse)


def _verify_forced(client: Any, spec: ConnectionSpec, runner: machine.Runner,
                   accept_target_writes: bool, report: Report) -> None:
    """finish --force: capture catches up and the target is verified; rows services wrote to
    the target directly since ready are accepted only with ``accept_target_writes``."""
    capture = make_capture(client, runner.rewrite)
    catch_up(runner, capture, report, within_s=DRAIN_S, what="finish --force")
    verify_until_stable(client, spec, runner, capture, report,
                        since_ms=int(runner.rewrite.get("ready_ms", machine.now_ms())))
    changed = int((runner.rewrite.get("verification") or {}).get("changed_meanwhile", 0))
    if changed and not accept_target_writes:
        raise machine.RewriteError(
            f"{changed} row(s) of {runner.rewrite.target} were written directly since the rewrite "
            "became ready (not by capture). If services wrote the new table on purpose, "
            "`finish --force --accept-target-writes` keeps them; otherwise find the writer"
        )


def restore_source_deviation(client: Any, rewrite: machine.Rewrite, job: RewriteJob,
                             source_exists: bool) -> None:
    """Put back the source's max_time_deviation that the switch widened for reverse capture."""
    declared = rewrite.get("source_declared_deviation")
    if declared is not None and source_exists:
        prepare.set_deviation(client, job.source, int(declared))


def drop_table(client: Any, name: str) -> None:
    """Drop a table, its search indexes first (the service refuses otherwise)."""
    for _table, index in client.list_search_index(name):
        client.delete_search_index(name, index)
    client.delete_table(name)


def abort(client: Any, runner: machine.Runner, *, discard_target_writes: bool = False,
          report: Report = quiet) -> machine.Rewrite:
    """Drop the target and put the source's stream back; the source's rows are never touched.
    After a revert, late writes to the target are carried to the source first (``late.settle``);
    those that conflict refuse it unless ``discard_target_writes``."""
    from tsmigrate.rewrite import late

    rewrite = runner.rewrite
    if not rewrite.active:
        raise machine.RewriteError(f"the rewrite into {rewrite.target} is already {rewrite.phase}")
    if rewrite.side != machine.SOURCE:
        raise machine.RewriteError(
            f"the rewrite into {rewrite.target} is {rewrite.phase}: services may have written "
            f"{rewrite.target} as the table of record, and abort drops it. "
            f"`tsmigrate rewrite revert {rewrite.target}` first (then abort)"
        )
    if late.watching(rewrite) == rewrite.target:
        late.settle(client, runner, report, other=_writes_watched(client, runner, report))
        refused = late.set_aside_error(runner.rewrite, "abort refused")
        if refused is None and not discard_target_writes:
            refused = late.refusal(client, runner.rewrite, "abort refused: the new table holds "
                                   "writes tsmigrate did not copy to the old one",
                                   "--discard-target-writes")
        if refused is not None:
            raise refused
        discarded = late.unaccepted(client, rewrite.target)
        if discarded:
            runner.save(conflicts_accepted=[late.describe(c) for c in discarded][:100])
        rewrite = runner.rewrite
    job = job_of(rewrite)
    if job.target.name in client.list_table():
        with contextlib.suppress(ts.OTSServiceError):
            drop_table(client, job.target.name)
    was = rewrite.get("stream_was")
    source_exists = job.source.name in client.list_table()
    if was is not None and source_exists:
        prepare.restore_stream(RawClient(client), job.source.name, was)
    restore_source_deviation(client, rewrite, job, source_exists)
    from tsmigrate.rewrite import checkpoints, reverse

    checkpoints.clear(client, job.id)
    late.forget(client, rewrite.target)
    aborted = runner.save(phase=machine.ABORTED, aborted_ms=machine.now_ms())
    reverse.forget_clients(client, aborted.target)
    return aborted
