"""A participant that stops answering mid-job: left out after one timeout, the job finishes.

The job runs over :class:`RemoteParticipant` proxies and a loopback channel (every message in
its JSON wire form); from some task on, one participant's tasks time out. It must be asked
exactly once after it stopped (one timeout, not one per round), the later rounds and the
validation run over the participants left, and the result must say so. The FedFuzzDB of a K
validated after the dropout must equal the central index over the survivors' pooled rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.coordinator.broker import TaskTimeoutError
from fedclust.coordinator.job import result_document, run_job
from fedclust.coordinator.remote import RemoteParticipant
from fedclust.participant.local import LocalParticipant
from fedclust.protocol import messages as msg
from fedclust.protocol.validity import soft_davies_bouldin
from fedclust.simulate import CountingService
from tests.coordinator.test_remote import LoopbackChannel

NAMES = [f"org-{i}" for i in range(4)]
GONE = "org-2"


class DroppingChannel(LoopbackChannel):
    """A loopback channel on which ``who`` times out from its task ``after`` on."""

    def __init__(self, locals_: dict[str, LocalParticipant], algorithm: msg.Algorithm,
                 *, who: str, after: int) -> None:
        super().__init__(locals_, algorithm)
        self.who, self.after = who, after
        self.timeouts = 0

    def ask(self, participant: str, spec: msg.TaskSpec) -> msg.Reply:
        if participant == self.who and self._next.get(participant, 0) >= self.after:
            self.timeouts += 1
            raise TaskTimeoutError(
                f"participant {participant!r} did not answer task {self.after} within 1 s"
            )
        return super().ask(participant, spec)


def _parts() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    centers = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    return [
        np.concatenate([c + rng.normal(scale=0.6, size=(40 + 7 * i, 2)) for c in centers])
        for i in range(len(NAMES))
    ]


@pytest.mark.parametrize(("algorithm", "after"), [("ffcm", 12), ("fkm", 6), ("fedfcm", 5)])
def test_a_silent_participant_is_left_out_after_one_timeout(
    algorithm: msg.Algorithm, after: int
) -> None:
    parts = _parts()
    counter = CountingService(NAMES)
    locals_ = {
        n: LocalParticipant(X, name=n, count_sink=counter.report)
        for n, X in zip(NAMES, parts, strict=True)
    }
    channel = DroppingChannel(locals_, algorithm, who=GONE, after=after)
    remotes = [RemoteParticipant(n, channel=channel, n_features=2) for n in NAMES]
    spec = msg.JobCreate(algorithm=algorithm, participants=NAMES, k_range=(2, 4), seed=3,
                         protection="none")
    doc = result_document(run_job(remotes, spec, total_count=counter.total), spec)

    assert channel.timeouts == 1  # asked once after it stopped, never again
    assert any(f"participant '{GONE}' dropped out" in n for n in doc.notes), doc.notes
    left = [f"K={e.k}: FedFuzzDB over the participants left" for e in doc.sweep]
    validated_after = [e for e, note in zip(doc.sweep, left, strict=True)
                       if any(n.startswith(note) for n in doc.notes)]
    assert validated_after, doc.notes  # the dropout came before some validation
    survivors = np.concatenate([X for n, X in zip(NAMES, parts, strict=True) if n != GONE])
    for entry in validated_after:  # over the survivors' rows, with their N
        centers = np.array(entry.centers, dtype=np.float64)
        assert entry.fed_fuzzy_db == pytest.approx(
            soft_davies_bouldin(survivors, centers, m=spec.m), rel=1e-9
        )
    assert all(e.simplified_silhouette is not None for e in doc.sweep)


def test_a_dropout_before_the_count_fails_the_job_after_one_timeout() -> None:
    counter = CountingService(NAMES)
    locals_ = {
        n: LocalParticipant(X, name=n, count_sink=counter.report)
        for n, X in zip(NAMES, _parts(), strict=True)
    }
    channel = DroppingChannel(locals_, "ffcm", who=GONE, after=1)  # after the declaration
    remotes = [RemoteParticipant(n, channel=channel, n_features=2) for n in NAMES]
    spec = msg.JobCreate(algorithm="ffcm", participants=NAMES, k=2, protection="none")
    with pytest.raises(TaskTimeoutError, match=f"participant '{GONE}' did not answer"):
        run_job(remotes, spec, total_count=counter.total)
    assert channel.timeouts == 1
