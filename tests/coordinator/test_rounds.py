"""Asking participants concurrently (coordinator._rounds): one pool per asking thread."""

from __future__ import annotations

import gc
import threading
import time

from fedclust.coordinator._rounds import Gatherer
from fedclust.protocol.errors import RefusedError


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


def _ask_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("fedclust-ask")}


def test_rounds_of_one_thread_reuse_its_asking_threads_and_they_end_with_it() -> None:
    before = _ask_threads()
    seen: list[set[str]] = []

    def job() -> None:
        gatherer = Gatherer()
        parts = [_Named(f"org-{i}") for i in range(5)]
        for round_number in range(3):
            names: set[str] = set()

            def ask(index: int, p: _Named) -> int:
                names.add(threading.current_thread().name)  # noqa: B023
                time.sleep(0.01)  # all five in flight at once
                return index

            answers, who = gatherer.gather(round_number, parts, ask)
            assert answers == [0, 1, 2, 3, 4]
            assert who == tuple(p.name for p in parts)
            seen.append(names)
            time.sleep(0.2)  # the pool's threads mark themselves idle after the answers

    thread = threading.Thread(target=job)
    thread.start()
    thread.join()
    assert len(seen[0]) == 5  # concurrent: one thread per participant in flight
    assert seen[1] == seen[0] == seen[2]  # the same threads in every round
    del thread
    deadline = time.monotonic() + 5
    while _ask_threads() - before:  # the job's pool went with its thread
        gc.collect()
        assert time.monotonic() < deadline, _ask_threads() - before
        time.sleep(0.01)


def test_a_refusal_is_noted_and_the_round_goes_on() -> None:
    parts = [_Named(f"org-{i}") for i in range(3)]

    def ask(index: int, p: _Named) -> int:
        if p.name == "org-1":
            raise RefusedError("not today")
        return index

    gatherer = Gatherer()
    answers, who = gatherer.gather(0, parts, ask)
    assert (answers, who) == ([0, 2], ("org-0", "org-2"))
    assert any("org-1" in note and "not today" in note for note in gatherer.notes)
