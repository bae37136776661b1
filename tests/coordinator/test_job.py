"""The job pipeline's own contract with the counting service."""

from __future__ import annotations

from fedclust.coordinator.job import run_job
from fedclust.data import synthetic
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.wire.messages import JobCreate
from fedclust.simulate import CountingService


def test_the_total_is_asked_once_after_everyone_reported() -> None:
    names = ["a", "b", "c"]
    counter = CountingService(names)
    asked: list[int] = []

    def total() -> int:
        asked.append(counter.total())  # raises unless the whole roster has reported
        return asked[-1]

    parts = [
        LocalParticipant(X, name=name, count_sink=counter.report)
        for name, (X, _) in zip(names, synthetic.motivational(seed=0), strict=True)
    ]
    spec = JobCreate(algorithm="fedfcm", participants=names, k_range=(2, 4), seed=0,
                     standardise=True, protection="none")
    outcome = run_job(parts, spec, total_count=total)
    assert len(asked) == 1  # standardisation, every K's FedFuzzDB and the silhouettes reuse it
    assert asked[0] == sum(len(X) for X, _ in synthetic.motivational(seed=0))
    assert [e.k for e in outcome.sweep.entries] == [2, 3, 4]
