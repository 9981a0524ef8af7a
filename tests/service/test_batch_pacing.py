"""Batch pacing: the AIMD send rate and the retry queue on a fake clock (no server, no sleeping)."""

import pytest

from tsmigrate.service.backoff import RetryQueue, SendRate


def test_send_rate_is_unpaced_until_the_service_throttles():
    rate = SendRate()
    for second in range(5):
        rate.answered(200, 10, sent_at=second, now=second + 0.1)  # 5%: retried, not slowed down
        assert rate.limit is None and rate.wait(second + 0.1) == 0
    rate.answered(2, 1, sent_at=6.0, now=6.01)  # half of 2 rows: too few to tell
    assert rate.limit is None
    rate.answered(2, 2, sent_at=7.0, now=7.01, refused=True)
    assert rate.limit is not None


def test_a_refused_request_cuts_the_rate_and_clean_answers_add_it_back():
    rate = SendRate(decrease=0.5, recover=4, tolerated=0.1)
    rate.answered(200, 200, sent_at=10.0, now=10.1, refused=True)  # 200 rows in 0.1 s: 2000/s
    assert rate.limit == pytest.approx(1000)
    assert rate.wait(10.1) == 0  # the slow answer is credited to the next request
    limits, waits, now = [], [], 10.1
    for _ in range(4):  # answered at once: requests go at the limit, the pauses make it up
        now += rate.wait(now)
        rate.answered(200, 0, sent_at=now, now=now)
        waits.append(rate.wait(now))
        limits.append(rate.limit)
    assert waits[:3] == pytest.approx([200 / 1250 - 0.1, 200 / 1500, 200 / 1750]) and waits[3] == 0
    # Additive, back where it was in `recover` answers: then unpaced again.
    assert limits[:3] == pytest.approx([1250, 1500, 1750]) and limits[3] is None
    assert rate.wait(14.1) == 0
    rate.answered(200, 21, sent_at=20.0, now=20.2)  # over 10% throttled: a cut
    # From the rate rows were written at: 979 rows in 0.3 s of requests.
    assert rate.limit == pytest.approx(979 / 0.3 / 2)


def test_the_rate_never_falls_below_its_floor():
    rate, now = SendRate(floor=50.0), 0.0
    for _ in range(40):  # every request refused, each answered in 1 s
        now += rate.wait(now)
        rate.answered(200, 200, sent_at=now, now=now + 1)
        now += 1
    assert rate.limit == 50.0 and rate.wait(now) == pytest.approx(3.0)  # 200 rows per 4 s


def test_retry_groups_come_back_when_their_backoff_is_over():
    queue: RetryQueue[str] = RetryQueue()
    queue.add(["late"], ready_at=5.0)
    queue.add(["a", "b"], ready_at=2.0)
    queue.add(["c"], ready_at=2.0)
    assert list(queue.due(1.9)) == [] and queue.next_ready() == 2.0
    assert list(queue.due(3.0)) == ["a", "b", "c"]
    assert queue and list(queue.due(9.0)) == ["late"] and not queue


def test_answers_that_took_no_time_on_the_clock_still_give_a_rate():
    rate = SendRate()
    rate.answered(200, 0, sent_at=1.0, now=1.0)
    rate.answered(200, 200, sent_at=1.0, now=1.0)
    assert rate.limit is not None and rate.limit > 1000
