"""The cut-over tests' tables: counters keyed (device, seq), rewritten into (seq, device), a
rewrite at ready over 20 rows, and the cut-over commands as library calls."""

from __future__ import annotations

from typing import Any

from tsmigrate import Column, Model, PrimaryKey
from tsmigrate.instance.apply import ApplyOptions, apply
from tsmigrate.rewrite import cutover, driver, machine
from tsmigrate.rewrite.planned import RewriteSettings
from tsmigrate.schema.model import compile_models
from tsmigrate.service import Rows, routing

IDENTITY = "local:test"
TARGET = "counters_by_seq"
ROWS = 20  # the rows `ready` writes: device d{i % 4}, seq i, count 0, note "start"
LEASE_S = 0.5  # the routing lease of the rewrite `ready` makes
ACK_S = 1.0  # its acknowledgement bound: finish waits LEASE_S + ACK_S past the fence


class Counter(Model, table="counters", max_versions=1):
    device = PrimaryKey(str)
    seq = PrimaryKey(int)
    count = Column(int)
    note = Column(str)


class CounterV2(Model, table="counters_by_seq", replaces="counters", max_versions=1):
    seq = PrimaryKey(int)
    device = PrimaryKey(str)
    count = Column(int)
    note = Column(str)


# The same two models as a project's model files, for the tests that run the commands.
MODELS_V1 = '''
from tsmigrate import Column, Model, PrimaryKey


class Counter(Model, table="counters", max_versions=1):
    device = PrimaryKey(str)
    seq = PrimaryKey(int)
    count = Column(int)
    note = Column(str)
'''
# The old model leaves the project's models with the new one (validation refuses replacing a
# table a model still declares); services keep their own Counter until they are redeployed.
MODELS_V2 = '''
from tsmigrate import Column, Model, PrimaryKey


class CounterV2(Model, table="counters_by_seq", replaces="counters", max_versions=1):
    seq = PrimaryKey(int)
    device = PrimaryKey(str)
    count = Column(int)
    note = Column(str)
'''

SETTINGS = RewriteSettings(options=driver.RunOptions(workers=2))


def ready(ots_instance: Any) -> Any:
    """A rewrite of ``counters`` into ``counters_by_seq`` at ready, ``ROWS`` rows copied; the
    instance's client."""
    routing.clear()
    client = ots_instance.client()
    apply(client, compile_models([Counter]), target_identity=IDENTITY)
    old = Rows(Counter, client)
    for i in range(ROWS):
        old.put(Counter(device=f"d{i % 4}", seq=i, count=0, note="start"))
    outcome = apply(client, compile_models([CounterV2]), ApplyOptions(rewrite=SETTINGS),
                    target_identity=IDENTITY)
    assert [r.phase for r in outcome.rewrites] == [machine.READY]
    # Services read the routing under a lease of LEASE_S seconds, which every fence waits out
    # (when a process does not acknowledge first): a shorter one keeps the fences of these
    # tests short. Set before any process read the rewrite, as `switch --lease` would for later.
    rewrite = machine.load(client, TARGET)
    machine.save(client, rewrite, routing_lease_s=LEASE_S, routing_ack_s=ACK_S)
    routing.clear()
    return client


def switch(client: Any, **options: Any) -> machine.Rewrite:
    with machine.Runner(client, TARGET, handover=True) as runner:
        return cutover.switch(client, driver.spec_of(client, True), runner, report=driver.quiet,
                              **options)


def finish(client: Any, **options: Any) -> machine.Rewrite:
    with machine.Runner(client, TARGET, handover=True) as runner:
        return driver.finish(client, driver.spec_of(client, True), runner, False,
                             report=driver.quiet, **options)


def revert(client: Any) -> machine.Rewrite:
    with machine.Runner(client, TARGET, handover=True) as runner:
        return cutover.revert(client, runner, report=driver.quiet)


def catch_up(client: Any) -> None:
    """Capture applies what the stream holds, in the direction the phase names."""
    with machine.Runner(client, TARGET, handover=True) as runner:
        if runner.rewrite.phase == machine.READY:
            driver.catch_up(runner, driver.make_capture(client, runner.rewrite), driver.quiet)
        else:
            driver.drain_reverse(client, runner, driver.quiet)
