"""The agent's roster rule (participant.rosters): evaluated on each job's declare task against
the rosters it joined before, kept in its state folder across restarts."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedclust.core.errors import RefusedError
from fedclust.participant.policy import Policy
from fedclust.participant.rosters import RosterBook
from fedclust.protocol.wire import messages as msg
from tests.participant.test_agent import (
    ME,
    Counting,
    blobs,
    run,
    task,
    terms,
    write_config,
    write_rows,
)

B, C, D, E, F = "hospital-b", "hospital-c", "hospital-d", "hospital-e", "hospital-f"


@pytest.fixture
def counting(tmp_path: Path) -> Iterator[Counting]:
    service = Counting(tmp_path / "counting.db")
    yield service
    service.app.state.store.close()


def declare(job: str, *roster: str) -> msg.Task:
    return task(0, msg.DeclareTask(terms=terms(participants=[ME, *roster])), job=job)


def test_a_roster_one_apart_from_a_joined_one_is_refused_across_restarts(
    tmp_path: Path, counting: Counting
) -> None:
    write_rows(tmp_path, blobs())
    config = write_config(tmp_path)  # the default rule: min_difference 3
    first = run(config, [
        declare("job-1", B, C),
        declare("job-2", B, C, D),  # one more than job-1: its total minus job-1's is D's
        declare("job-3", B, C),  # the same roster again
        declare("job-4", D, E, F),  # five apart from job-1
    ], counting).replies()
    assert isinstance(first[0], msg.DeclarationReply)
    assert isinstance(first[1], msg.RefusalReply)
    assert first[1].reason.startswith(
        f"the job's roster [{ME}, {B}, {C}, {D}] differs from the roster [{ME}, {B}, {C}] of "
        "a job this participant joined by 1 participant(s)"
    )
    assert re.search(r"\b137\b", first[1].reason) is None  # nothing about the rows
    assert isinstance(first[2], msg.DeclarationReply) and first[2] == first[0]
    assert isinstance(first[3], msg.DeclarationReply)

    # A restarted agent (same state folder) remembers the rosters it joined.
    again = run(config, [
        declare("job-5", C, D),  # two apart from job-1 ([b, c] -> [c, d])
        declare("job-1", B, C),  # job-1's declare task delivered again: same roster
        declare("job-1", B, C, E),  # a job's roster cannot change
    ], counting).replies()
    assert isinstance(again[0], msg.RefusalReply) and "by 2 participant(s)" in again[0].reason
    assert isinstance(again[1], msg.DeclarationReply)
    assert isinstance(again[2], msg.RefusalReply)
    assert "a job's roster cannot change" in again[2].reason


def test_a_protected_sum_needs_an_admitted_roster_containing_its_cohort(
    tmp_path: Path, counting: Counting
) -> None:
    write_rows(tmp_path, blobs())
    key = base64.b64encode(bytes(32)).decode()

    def advertise(job: str, task_id: int, *cohort: str) -> msg.Task:
        spec = msg.SecureSetupTask(
            roster=[ME, *cohort], threshold=2, identities={p: key for p in (ME, *cohort)},
        )
        return task(task_id, spec, job=job)

    replies = run(write_config(tmp_path), [
        advertise("job-1", 0, B, C),  # no declare task first
        declare("job-2", B, C),
        advertise("job-2", 1, B, D),  # a cohort beyond the roster
    ], counting).replies()
    assert isinstance(replies[0], msg.RefusalReply)
    assert "job 'job-1' was never declared to this participant" in replies[0].reason
    assert isinstance(replies[2], msg.RefusalReply)
    assert "reaches beyond the job's roster" in replies[2].reason


def test_rule_any_joins_every_roster_but_no_undeclared_job(tmp_path: Path) -> None:
    """Even under rule "any" a task of a job never declared is refused: without the
    declaration its terms cannot be checked."""
    book = RosterBook(tmp_path / "rosters.json")
    for roster in ([ME, B, C], [ME, B, C, D], [ME, B]):
        book.admit("job-" + str(len(roster)), roster, Policy(rosters="any"), me=ME)
    with pytest.raises(RefusedError, match="'never-declared' was never declared"):
        book.require_admitted("never-declared")
    with pytest.raises(RefusedError, match="differs from the roster"):  # saved, then ruled
        RosterBook(tmp_path / "rosters.json").admit("job-9", [ME, B, C, E], Policy(), me=ME)
