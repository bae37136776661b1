"""The web framework's floor for one service round, measured beside the service.

A round of the service is one request per participant: it posts its contribution and gets
its next task back (``answer_task``). :data:`app` is the least a FastAPI app can do for that
request: parse the same ``Contribution`` body with its pydantic model and answer with the
bytes of a task of the same size, with no authentication, broker, journal or metrics.
:class:`FloorClients` sends one such request per participant per round from as many threads
as the service has agents, over the same transport; its round time (and, served by uvicorn
in its own process, that process's CPU) is what any FastAPI service of this shape pays.

Run standalone under uvicorn: ``python -m uvicorn benchmarks._floor:app``.
"""

from __future__ import annotations

import threading
from typing import Final

import httpx
import numpy as np
from fastapi import FastAPI, Response

from fedclust.protocol.wire import messages as msg

__all__ = ["FloorClients", "app", "contribution_body"]


def _task_body(k: int, d: int) -> bytes:
    centers = np.linspace(-1.0, 1.0, k * d).reshape(k, d)
    spec = msg.StatisticTask.of("fcm_sums", centers, m=2.0)
    return msg.Task(job_id="job", task_id=1, algorithm="ffcm", spec=spec).model_dump_json().encode()


def contribution_body(k: int, d: int) -> bytes:
    """A contribution of exact-FCM sums for ``k`` centers of ``d`` features, as JSON."""
    rng = np.random.default_rng(0)
    reply = msg.StatisticReply(fields={
        "u_sum": msg.WireArray.of(rng.uniform(1.0, 2.0, size=k)),
        "weighted_sum": msg.WireArray.of(rng.standard_normal((k, d))),
    })
    return msg.Contribution(job_id="job", task_id=0, reply=reply).model_dump_json().encode()


#: The answer every request gets (K and D of ``bench_protocol_overhead``).
TASK: Final = _task_body(5, 4)

app = FastAPI()


@app.post("/answer")
async def answer(body: msg.Contribution) -> Response:
    """Parse a contribution; answer with a task's bytes."""
    return Response(content=TASK, media_type="application/json")


class FloorClients:
    """``n`` threads, each with its own client, posting one contribution per round.

    ``transports`` (one in-process ASGI transport per thread) or ``base_url`` (a uvicorn
    process) say where :data:`app` runs. :meth:`rounds` runs rounds one after the other,
    every thread posting once per round, and returns when the last has finished.
    """

    def __init__(
        self, n: int, body: bytes, *, base_url: str = "http://floor",
        transports: list[httpx.BaseTransport] | None = None,
    ) -> None:
        self._body = body
        self._start = threading.Barrier(n + 1)
        self._end = threading.Barrier(n + 1)
        self._closing = False
        self._errors: list[str] = []
        self._threads = [
            threading.Thread(
                target=self._post_rounds,
                args=(httpx.Client(base_url=base_url,
                                   transport=None if transports is None else transports[i]),),
                daemon=True,
            )
            for i in range(n)
        ]
        for thread in self._threads:
            thread.start()

    def _post_rounds(self, client: httpx.Client) -> None:
        headers = {"Content-Type": "application/json"}
        with client:
            while True:
                self._start.wait()
                if self._closing:
                    return
                try:
                    response = client.post("/answer", content=self._body, headers=headers)
                except httpx.HTTPError as exc:  # recorded: the round still ends
                    self._errors.append(f"{type(exc).__name__}: {exc}")
                else:
                    if response.status_code != 200:
                        self._errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
                self._end.wait()

    def rounds(self, count: int) -> None:
        """Run ``count`` rounds; raise if a request failed."""
        for _ in range(count):
            self._start.wait()
            self._end.wait()
        if self._errors:
            raise RuntimeError(f"a floor request failed: {self._errors[0]}")

    def close(self) -> None:
        self._closing = True
        self._start.wait()
        for thread in self._threads:
            thread.join(timeout=30)
