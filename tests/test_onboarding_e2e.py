"""Onboarding without restarts, end to end over real HTTP (issue 11).

A federation of three organisations runs (coordinator and counting service as uvicorn
threads, agents as threads). An admin invites a fourth with ``fedclust federation invite``;
it redeems the invite with ``fedclust participant enrol``, its agent starts with the token
stored by the enrolment; a job over all four fails at the counting service until the counting
operator approves the newcomer (``fedclust counter members approve`` with the digest the
organisation reports, ``fedclust participant identity --token-digest``); then a masked ffcm
job over all four gives the simulator's result; no service restarts. ``fedclust federation
revoke`` then makes its next request 401 at both services, and ``fedclust federation
audit`` lists the three changes, without secrets.
"""

from __future__ import annotations

import json
import stat
import threading
import tomllib
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fedclust.cli import main
from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import participant_config, write_federation, write_toml
from fedclust.data.federations import Federation
from fedclust.demo import free_port
from fedclust.participant.agent import run_agent
from fedclust.participant.config import ParticipantConfig
from fedclust.protocol.wire.messages import JobCreate
from fedclust.simulate import simulate
from tests._servers import serve_coordinator, serve_counting

SEED = 5
FOUNDERS = ("hospital-a", "hospital-b", "hospital-c")
NEWCOMER = "hospital-d"


def _shares() -> dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    rng = np.random.default_rng(SEED)
    means = np.array([[0.0, 0.0], [6.0, 6.0], [0.0, 7.0]])
    out = {}
    for i, pid in enumerate((*FOUNDERS, NEWCOMER)):
        y = rng.integers(0, 3, size=40 + 3 * i)
        out[pid] = (means[y] + rng.normal(scale=0.8, size=(y.size, 2)), y)
    return out


def _make_admin(coordinator_toml: Path) -> None:
    """The test federation's analyst becomes an admin (``role = "admin"``)."""
    doc = tomllib.loads(coordinator_toml.read_text(encoding="utf-8"))
    doc["analysts"][0]["role"] = "admin"
    write_toml(coordinator_toml, doc, private=True)


def _agent(config_path: Path, stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(
        target=run_agent, args=(ParticipantConfig.from_file(config_path),),
        kwargs={"stop": stop, "poll_wait": 2.0}, daemon=True,
    )
    thread.start()
    return thread


def test_an_organisation_joins_takes_part_and_is_revoked_without_restarts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shares = _shares()
    for pid, (X, _y) in shares.items():
        np.savetxt(tmp_path / f"{pid}.csv", X, fmt="%.17g", delimiter=",", header="x,y",
                   comments="")
    files = write_federation(
        tmp_path, data={pid: f"{pid}.csv" for pid in FOUNDERS}, columns=["x", "y"],
        coordinator_port=free_port(), counting_port=free_port(), task_timeout_seconds=60,
    )
    _make_admin(files.coordinator)
    newcomer_toml = tmp_path / f"participant-{NEWCOMER}.toml"
    doc = participant_config(
        participant_id=NEWCOMER, coordinator_url=files.coordinator_url,
        counting_url=files.counting_url, token="unused", state_dir=f"state-{NEWCOMER}",
        data_path=f"{NEWCOMER}.csv", columns=["x", "y"],
    )
    section = dict(doc["participant"])  # type: ignore[arg-type]  # a table, not a list
    del section["token"]  # no token: the enrolment provides it
    write_toml(newcomer_toml, doc | {"participant": section})

    counting = serve_counting(files)
    coordinator = serve_coordinator(files)
    founders_stop, newcomer_stop = threading.Event(), threading.Event()
    threads = [_agent(files.participants[pid], founders_stop) for pid in FOUNDERS]
    client = AnalystClient(AnalystConfig(files.coordinator_url, files.analyst_token))
    analyst = str(files.analyst)
    try:
        client.wait_enrolled(list(FOUNDERS), timeout=60)

        assert main(["federation", "invite", NEWCOMER, "--config", analyst, "--expires", "1h"]) \
            == 0
        invite = capsys.readouterr().out.strip()
        assert len(invite.splitlines()) == 1 and len(invite) >= 32
        assert main(["participant", "enrol", "--invite", invite, "--config", str(newcomer_toml)]) \
            == 0
        out = capsys.readouterr().out
        assert out.startswith(f"participant {NEWCOMER} enrolled") and len(out.splitlines()) == 1
        token_file = tmp_path / f"state-{NEWCOMER}" / "participant.token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text(encoding="utf-8").strip()
        assert "token" not in tomllib.loads(newcomer_toml.read_text(encoding="utf-8"))[
            "participant"
        ]  # the config file was not rewritten with the secret
        replay = main(["participant", "enrol", "--invite", invite, "--config", str(newcomer_toml)])
        assert replay == 2 and "HTTP 403" in capsys.readouterr().err

        threads.append(_agent(newcomer_toml, newcomer_stop))
        client.wait_enrolled([NEWCOMER], timeout=60)
        everyone = [*FOUNDERS, NEWCOMER]
        unapproved = client.follow(
            client.submit(JobCreate.model_validate({
                "algorithm": "ffcm", "participants": everyone, "k": 2, "max_rounds": 2,
            })).id, poll=0.05, timeout=120,
        )
        assert unapproved.state == "failed"
        assert f"'{NEWCOMER}' await(s) the counting operator's approval" in str(unapproved.error)
        assert main(["participant", "identity", "--token-digest",
                     "--config", str(newcomer_toml)]) == 0
        digest = capsys.readouterr().out.split(" = ")[1].strip()
        assert main(["counter", "members", "approve", NEWCOMER, "--token-sha256", digest,
                     "--config", str(files.counting)]) == 0
        assert capsys.readouterr().out.startswith(f"approved {NEWCOMER}")
        spec = JobCreate.model_validate({
            "algorithm": "ffcm", "participants": everyone, "seed": SEED, "k_range": (2, 3),
            "standardise": True, "max_rounds": 10,
        })
        assert spec.protection == "masking"
        job = client.follow(client.submit(spec).id, poll=0.05, timeout=120)
        assert job.state == "succeeded", job.error
        got = client.result(job.id)
        want = simulate(
            Federation.from_pairs("four", [shares[pid] for pid in everyone]), algorithm="ffcm",
            ks=spec.ks, seed=SEED, standardise=True, max_rounds=10, protection="masking",
        ).to_document()
        assert got.k_selected == want.k_selected
        for g, w in zip(got.sweep, want.sweep, strict=True):
            np.testing.assert_allclose(
                np.array(g.centers, dtype=float), np.array(w.centers, dtype=float),
                rtol=1e-12, atol=1e-12,
            )

        newcomer_stop.set()
        threads[-1].join(timeout=30)
        assert main(["federation", "revoke", NEWCOMER, "--config", analyst]) == 0
        assert capsys.readouterr().out.strip() == f"revoked {NEWCOMER}"
        bearer = {"Authorization": f"Bearer {token}"}
        assert httpx.get(
            f"{files.coordinator_url}/api/v1/tasks/next", params={"wait": 0}, headers=bearer
        ).status_code == 401
        assert httpx.post(
            f"{files.counting_url}/api/v1/jobs/{job.id}/counts", headers=bearer,
            json={"job_id": job.id, "count": 1},
        ).status_code == 401

        assert main(["federation", "audit", "--config", analyst, "--json"]) == 0
        trail_text = capsys.readouterr().out
        trail = json.loads(trail_text)
        assert [(e["action"], e["participant_id"]) for e in trail] == [
            ("invited", NEWCOMER), ("enrolled", NEWCOMER), ("revoked", NEWCOMER)
        ]
        assert invite not in trail_text and token not in trail_text
    finally:
        client.close()
        founders_stop.set()
        newcomer_stop.set()
        for thread in threads:
            thread.join(timeout=30)
        coordinator.stop()
        counting.stop()
