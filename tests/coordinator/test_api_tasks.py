"""Contributions: rejected ones change nothing, the job continues after a corrected one."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from fedclust.data.federations import Federation as DataFederation
from fedclust.protocol.wire import messages as msg
from fedclust.simulate import simulate
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    FakeCounting,
    Federation,
    assert_same_result,
    auth,
    blobs,
    create_job,
    enrol,
    post_reply,
    running_app,
    token,
    wait_for_state,
)

ME = NAMES[0]


class Tamperer:
    """participant-0's submissions: on its first center_sums task, bad replies come first."""

    def __init__(self) -> None:
        self.checked = False

    def __call__(self, client: TestClient, task: msg.Task, reply: msg.Reply) -> None:
        if self.checked or not (isinstance(reply, msg.StatisticReply) and "sums" in reply.fields):
            post_reply(client, ME, task, reply, expect=202)
            return
        self.checked = True
        good: dict[str, Any] = json.loads(reply.model_dump_json())
        s, k, d = reply.fields["sums"].shape

        fields = {**reply.fields, "sums": msg.WireArray.of(np.zeros((s, k, d + 1)))}
        wrong = reply.model_copy(update={"fields": fields})
        response = post_reply(client, ME, task, wrong, expect=422)
        assert "'sums' must be float64 of shape" in response.text

        nan = np.zeros((s, k, d))
        nan[0, 0, 0] = np.nan
        sums = {**good["fields"]["sums"], "data": base64.b64encode(nan.tobytes()).decode()}
        nan_reply = {**good, "fields": {**good["fields"], "sums": sums}}
        response = post_reply(client, ME, task, nan_reply, expect=422)
        assert "NaN or infinity" in response.text

        response = post_reply(client, ME, task, msg.AckReply(), expect=422)
        assert "needs a 'statistic' reply" in response.text
        post_reply(client, ME, task, {"kind": "statistic"}, expect=422)  # fields missing

        url = f"{API}/jobs/{task.job_id}/tasks/{task.task_id}/contribution"
        body = {"job_id": task.job_id, "task_id": task.task_id + 1, "reply": good}
        mismatch = client.post(url, json=body, headers=auth(token(ME)))
        assert mismatch.status_code == 422  # body and path disagree
        unknown = {"job_id": task.job_id, "task_id": 999, "reply": good}
        response = client.post(
            f"{API}/jobs/{task.job_id}/tasks/999/contribution", json=unknown,
            headers=auth(token(ME)),
        )
        assert response.status_code == 404

        post_reply(client, ME, task, reply, expect=202)
        post_reply(client, ME, task, reply, expect=409)  # duplicate


def test_rejected_contributions_change_nothing(tmp_path: Path) -> None:
    parts = blobs(seed=3)
    counting = FakeCounting()
    federation = Federation(parts, counting)
    tamperer = Tamperer()
    with running_app(tmp_path, counting) as client:
        for name in NAMES:
            enrol(client, name)
        job = create_job(client, algorithm="fedfcm", k=3, seed=5)
        with federation.agents(client, submit={ME: tamperer}):
            done = wait_for_state(client, job["id"], ("succeeded", "failed"))
        assert done["state"] == "succeeded", done["error"]
        got = msg.ResultDocument.model_validate_json(
            client.get(f"{API}/jobs/{job['id']}/result", headers=ANALYST).content
        )
    assert tamperer.checked
    want = simulate(DataFederation("blobs", tuple(parts)), algorithm="fedfcm", ks=[3], seed=5,
                    protection="none")
    assert_same_result(got, want.to_document())
