"""A job over the in-process service (apps and agents in this process) with one agent down.

Every participant's agent enrols; the ``gone`` one is then stopped (and joined, so it is not
polling) before the job is submitted: its declaration times out after ``timeout`` seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedclust.asgi import InProcessApp
from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import write_federation
from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.counting.app import create_app as create_counting
from fedclust.counting.settings import CountingSettings
from fedclust.participant.agent import run_agent
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.policy import accepting
from fedclust.protocol.wire.messages import JobCreate, ResultDocument

__all__ = ["run_with_one_down"]


def run_with_one_down(
    root: Path,
    spec: JobCreate,
    parts: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    *,
    gone: str,
    timeout: float = 10.0,
) -> ResultDocument:
    """The result of ``spec`` (its participants hold ``parts`` with ``labels``, in order)
    with ``gone``'s agent stopped before submission; the job must succeed.

    ``timeout`` is every task's: the agents' local training must finish within it also on a
    loaded machine, or a member drops out in a later round (which fails these jobs).
    """
    names = list(spec.participants)
    shares = {}
    for name, X, y in zip(names, parts, labels, strict=True):
        np.save(root / f"{name}.npy", np.column_stack([X, y]))
        shares[name] = f"{name}.npy"
    files = write_federation(
        root, data=shares, coordinator_port=8700, counting_port=8701,
        label_column=parts[0].shape[1], task_timeout_seconds=timeout,
        protections=sorted(accepting(spec.protection)),
    )
    stops = {name: threading.Event() for name in names}
    counting_app = create_counting(CountingSettings.from_file(files.counting))
    with InProcessApp(counting_app, counting_app.router.lifespan_context) as counting:
        coordinator_app = create_coordinator(
            CoordinatorSettings.from_file(files.coordinator),
            counting_transport=counting.transport(),
        )
        with InProcessApp(coordinator_app, coordinator_app.router.lifespan_context) as app:
            agents = {
                name: threading.Thread(
                    target=run_agent, args=(ParticipantConfig.from_file(path),),
                    kwargs={"stop": stops[name], "transport": app.transport(),
                            "counting_transport": counting.transport(), "poll_wait": 0.5},
                    daemon=True,
                )
                for name, path in files.participants.items()
            }
            for agent in agents.values():
                agent.start()
            config = AnalystConfig(files.coordinator_url, files.analyst_token)
            try:
                with AnalystClient(config, transport=app.transport()) as client:
                    client.wait_enrolled(names, timeout=60)
                    stops[gone].set()
                    agents[gone].join(timeout=30)  # not polling when the job is submitted
                    assert not agents[gone].is_alive()
                    job = client.follow(client.submit(spec).id, poll=0.1, timeout=300)
                    assert job.state == "succeeded", job.error
                    return client.result(job.id)
            finally:
                for stop in stops.values():
                    stop.set()
                for agent in agents.values():
                    agent.join(timeout=30)
