"""The phases of a rewrite, and which table takes the writes of services in each.

Phases and transitions (the engine's state machine, ``tsmigrate.rewrite.machine``, moves them)::

    prepare -> backfill -> catch-up -> ready -> switching -> switched -> finishing -> done
    switched -> reverting -> ready   (revert, until finish)
    ready -> finishing               (finish --force: services not on the model API)
    any running phase -> paused  (pause; resume goes back to the phase it left)
    any running phase -> failed  (an error; resume or apply retries the phase it left)
    anything before switching -> aborted (abort: the target is dropped, the source left as it was)

The phase also tells services on the model API which table takes their writes (``side``): the
source until the switch, the target after it; while a fence is up (switching, reverting,
finishing from ready) they hold their writes.
"""

from __future__ import annotations

PREPARE, BACKFILL, CATCH_UP, READY, FINISHING, DONE = (
    "prepare", "backfill", "catch-up", "ready", "finishing", "done",
)
SWITCHING, SWITCHED, REVERTING = "switching", "switched", "reverting"
PAUSED, FAILED, ABORTED = "paused", "failed", "aborted"
RUNNING_PHASES = (PREPARE, BACKFILL, CATCH_UP, READY, SWITCHING, SWITCHED, REVERTING, FINISHING)
PHASES = (*RUNNING_PHASES, DONE, PAUSED, FAILED, ABORTED)
ENDED = (DONE, ABORTED)
# Services may have written the target as the table of record: abort would lose their writes.
CUT_OVER = (SWITCHING, SWITCHED, REVERTING)

SOURCE, TARGET, HOLD = "source", "target", "hold"


def side(phase: str, resume_to: str | None = None, finish_from: str | None = None) -> str:
    """Which table takes the writes of services on the model API in ``phase``: ``source``,
    ``target``, or ``hold`` (a fence is up: writes wait until it comes down)."""
    if phase in (PAUSED, FAILED):
        phase = resume_to or READY
        if phase in (SWITCHING, REVERTING):  # a fence a failure left up: the next command ends it
            return HOLD
    if phase in (SWITCHING, REVERTING):
        return HOLD
    if phase == FINISHING:
        return TARGET if finish_from == SWITCHED else HOLD
    if phase in (SWITCHED, DONE):
        return TARGET
    return SOURCE

