"""The real service in one process: coordinator, counting service and agents over ASGI.

``fedclust simulate --transport asgi`` runs a job through the actual FastAPI apps, the
participant agents and the analyst client, connected by in-process httpx transports
(:mod:`fedclust.asgi`) instead of sockets. Everything a deployment does happens — enrolment,
long polls, wire messages, the counting service, the database — so research sweeps exercise
the real protocol; only the network is missing.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from fedclust.asgi import InProcessApp
from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import FederationFiles, write_federation
from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.counting.app import create_app as create_counting
from fedclust.counting.settings import CountingSettings
from fedclust.data.federations import Federation
from fedclust.participant.agent import run_agent
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.policy import accepting
from fedclust.protocol.wire.messages import JobCreate, JobPublic, ResultDocument

__all__ = ["run_in_process", "serving"]

_ENROL_TIMEOUT = 60.0
_JOB_TIMEOUT = 3600.0


@contextmanager
def _folder(workdir: Path | None) -> Iterator[Path]:
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        yield workdir
        return
    with tempfile.TemporaryDirectory(prefix="fedclust-asgi-") as tmp:
        yield Path(tmp)


def run_in_process(
    federation: Federation,
    spec: JobCreate,
    *,
    min_cohort: int = 3,
    workdir: Path | None = None,
    labels: Sequence[ArrayLike] | None = None,
    on_finished: Callable[[AnalystClient, JobPublic], None] | None = None,
) -> ResultDocument:
    """Run ``spec`` through the real apps and agents in this process; return its result.

    The user plays every party here, so the agents accept the job's protection, "none"
    included (``[policy] protections``).

    ``spec.participants`` names the participants, one per dataset of ``federation``, in
    order. Each agent reads its share from a file in ``workdir`` (a temporary folder when
    None), as a deployed agent would. ``labels`` (one integer vector per dataset, for
    model-based jobs such as "fed-distill") are stored as the files' last column and declared
    as each participant's ``label_column``. ``on_finished(client, job)`` is called with the
    analyst client once the job has succeeded, while the services still run (e.g. to read
    its disclosure ledger).
    """
    if len(spec.participants) != len(federation.parts):
        raise ValueError(
            f"spec names {len(spec.participants)} participants for "
            f"{len(federation.parts)} datasets."
        )
    with _folder(workdir) as root:
        shares = {}
        width = federation.parts[0].shape[1] if federation.parts else 0
        if labels is not None and len(labels) != len(federation.parts):
            raise ValueError(f"labels must hold one vector per dataset ({len(federation.parts)}).")
        for i, (pid, X) in enumerate(zip(spec.participants, federation.parts, strict=True)):
            rows = X if labels is None else np.column_stack([X, np.asarray(labels[i])])
            np.save(root / f"{pid}.npy", rows)
            shares[pid] = f"{pid}.npy"
        files = write_federation(
            root, data=shares, coordinator_port=8700, counting_port=8701,
            min_participants=min_cohort, label_column=None if labels is None else width,
            protections=sorted(accepting(spec.protection)),
        )
        with serving(files) as coordinator:
            config = AnalystConfig(coordinator_url=files.coordinator_url, token=files.analyst_token)
            with AnalystClient(config, transport=coordinator.transport()) as client:
                client.wait_enrolled(list(spec.participants), timeout=_ENROL_TIMEOUT)
                job = client.follow(client.submit(spec).id, poll=0.05, timeout=_JOB_TIMEOUT)
                if job.state != "succeeded":
                    raise RuntimeError(f"job {job.id} {job.state}: {job.error}")
                doc = client.result(job.id)
                if on_finished is not None:
                    on_finished(client, job)
    return doc.model_copy(update={"dataset": federation.name})


@contextmanager
def serving(files: FederationFiles, *, poll_wait: float = 0.5) -> Iterator[InProcessApp]:
    """The federation of ``files`` running in this process: the counting service and the
    coordinator as in-process apps (no sockets), every participant's agent in a thread;
    yields the coordinator's app (``.transport()`` for an analyst client). Stops all at exit."""
    counting_app = create_counting(CountingSettings.from_file(files.counting))
    with ExitStack() as stack:
        counting = stack.enter_context(
            InProcessApp(counting_app, counting_app.router.lifespan_context)
        )
        coordinator_app = create_coordinator(
            CoordinatorSettings.from_file(files.coordinator),
            counting_transport=counting.transport(),
        )
        coordinator = stack.enter_context(
            InProcessApp(coordinator_app, coordinator_app.router.lifespan_context)
        )
        stop = threading.Event()
        agents = [
            threading.Thread(
                target=run_agent,
                args=(ParticipantConfig.from_file(path),),
                kwargs={
                    "stop": stop,
                    "transport": coordinator.transport(),
                    "counting_transport": counting.transport(),
                    "poll_wait": poll_wait,
                },
                name=f"agent-{pid}",
                daemon=True,
            )
            for pid, path in files.participants.items()
        ]
        for agent in agents:
            agent.start()
        try:
            yield coordinator
        finally:
            stop.set()
            for agent in agents:
                agent.join(timeout=10)
