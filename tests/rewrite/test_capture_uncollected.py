"""A page is applied without the cyclic collector (capture._uncollected): off while any thread
applies one, back on after the last (also when a page fails), left off if it was off."""

from __future__ import annotations

import gc
import threading

import pytest

from tsmigrate.rewrite import capture


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_off_during_a_page_and_on_after_even_a_failed_one() -> None:
    with capture._uncollected():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), capture._uncollected():
        raise RuntimeError("the page failed")
    assert gc.isenabled()


def test_pages_of_several_threads_turn_it_back_on_with_the_last() -> None:
    inside, leave = threading.Event(), threading.Event()

    def page() -> None:
        with capture._uncollected():
            inside.set()
            leave.wait(10)

    other = threading.Thread(target=page)
    other.start()
    inside.wait(10)
    with capture._uncollected():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's page goes on
    leave.set()
    other.join(10)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with capture._uncollected():
        pass
    assert not gc.isenabled()
