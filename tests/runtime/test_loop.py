"""The chunk loop (sluice.runtime.loop.pipelined): chunk k is finished after k + 1 is dispatched."""

import pytest

from sluice.runtime.loop import pipelined


def _recorder():
    events = []

    def dispatch(start):
        events.append(("dispatch", start))
        return f"result {start}"

    def finish(start, result):
        events.append(("finish", start, result))

    return events, dispatch, finish


def test_each_chunk_is_finished_after_the_next_is_dispatched():
    events, dispatch, finish = _recorder()
    pipelined([0, 10, 20, 30], dispatch, finish)
    assert events == [
        ("dispatch", 0),
        ("dispatch", 10),
        ("finish", 0, "result 0"),
        ("dispatch", 20),
        ("finish", 10, "result 10"),
        ("dispatch", 30),
        ("finish", 20, "result 20"),
        ("finish", 30, "result 30"),
    ]


def test_one_start_is_dispatched_then_finished():
    events, dispatch, finish = _recorder()
    pipelined([5], dispatch, finish)
    assert events == [("dispatch", 5), ("finish", 5, "result 5")]


def test_no_starts_calls_nothing():
    events, dispatch, finish = _recorder()
    pipelined([], dispatch, finish)
    pipelined(iter(()), dispatch, finish)
    assert events == []


def test_starts_may_be_a_generator_consumed_lazily():
    events, dispatch, finish = _recorder()

    def starts():
        for s in (0, 1, 2):
            events.append(("yield", s))
            yield s

    pipelined(starts(), dispatch, finish)
    assert [e[0] for e in events] == [
        "yield", "dispatch", "yield", "dispatch", "finish", "yield", "dispatch", "finish", "finish",
    ]  # fmt: skip


def test_an_error_in_finish_surfaces_after_the_next_dispatch_and_stops_the_loop():
    events = []

    def dispatch(start):
        events.append(("dispatch", start))
        return start

    def finish(start, result):
        events.append(("finish", start))
        if start == 10:
            raise RuntimeError("disk full at 10")

    with pytest.raises(RuntimeError, match="disk full at 10"):
        pipelined([0, 10, 20, 30], dispatch, finish)
    # chunk 20 was already dispatched when 10's write failed; nothing after that ran
    assert events == [
        ("dispatch", 0),
        ("dispatch", 10),
        ("finish", 0),
        ("dispatch", 20),
        ("finish", 10),
    ]


def test_an_error_in_the_last_finish_propagates():
    def finish(start, result):
        raise ValueError(f"bad chunk {start}")

    with pytest.raises(ValueError, match="bad chunk 7"):
        pipelined([7], lambda s: s, finish)


def test_an_error_in_dispatch_propagates_before_the_previous_chunk_is_finished():
    events = []

    def dispatch(start):
        if start == 2:
            raise RuntimeError("compile failed")
        events.append(("dispatch", start))
        return start

    with pytest.raises(RuntimeError, match="compile failed"):
        pipelined([0, 1, 2, 3], dispatch, lambda s, r: events.append(("finish", s)))
    assert events == [("dispatch", 0), ("dispatch", 1), ("finish", 0)]
