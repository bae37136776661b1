"""The dashboard in a real headless Chromium against a real federation on loopback sockets.

The counting service and the coordinator run under uvicorn, the participants' agents in
threads: "a", "b" and "c" answer, "d" enrols and then stops (a job naming it waits for it,
so it can be cancelled). "a" alone holds a far cluster, so FedFCM's center for it rests on
one participant. One job is run to completion with the analyst client first; the browser
then signs in with the analyst token, reads that job (K curve, centers, the flag at the
center resting on one participant, the grouped disclosure ledger), submits a job with the
form and watches it finish, downloads its results, and cancels a job. Under mutual TLS it
reaches the dashboard only with the analyst's PKCS#12 file from ``fedclust.pki``. The
distribution's chromium is driven by Playwright (never ``playwright install``); without
either, the test skips.
"""

from __future__ import annotations

import io
import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import FederationFiles, write_federation
from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.demo import free_port
from fedclust.participant.agent import run_agent
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.policy import PROTECTIONS
from fedclust.pki import export_p12
from fedclust.protocol import algorithms
from fedclust.protocol.wire.messages import DisclosureLedger, JobCreate, JobPublic, ResultDocument
from fedclust.protocol.wire.result_tables import feature_names
from tests._servers import ServerThread, serve_coordinator, serve_counting

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TIMEOUT_MS = 30_000
JOB_TIMEOUT_MS = 90_000
POLL_MS = 2000  # the dashboard's refresh (POLL_MS in app.js)
ANSWERING = ("a", "b", "c")
SILENT = "d"  # enrols, then stops answering

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).is_file(),
    reason="no chromium at /usr/bin/chromium (apt-get install chromium) for the browser test",
)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the browser test needs playwright (the dev extra)"
)


@dataclass(frozen=True)
class Served:
    """A federation on sockets holding one finished job."""

    url: str
    token: str
    participant_token: str
    client: AnalystClient
    job: JobPublic
    result: ResultDocument
    ledger: DisclosureLedger


def _shares(seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    """Two clusters every participant holds; a third only "a" holds (and "d" a copy of
    "b"'s rows)."""
    rng = np.random.default_rng(seed)

    def blob(center: tuple[float, float], n: int) -> np.ndarray[Any, Any]:
        return np.asarray(center) + rng.normal(scale=0.5, size=(n, 2))

    common = [blob((0.0, 0.0), 40), blob((6.0, 0.0), 40)]
    b, c = np.vstack(common), np.vstack([blob((0.0, 0.0), 40), blob((6.0, 0.0), 40)])
    return {"a": np.vstack([*common, blob((0.0, 20.0), 30)]), "b": b, "c": c, SILENT: b}


def _agent(path: Path, stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(
        target=run_agent, args=(ParticipantConfig.from_file(path),),
        kwargs={"stop": stop, "poll_wait": 0.5}, daemon=True,
    )
    thread.start()
    return thread


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("dashboard")
    data = {}
    for pid, rows in _shares().items():
        np.savetxt(root / f"{pid}.csv", rows, fmt="%.17g", delimiter=",", header="x,y",
                   comments="")
        data[pid] = f"{pid}.csv"
    files: FederationFiles = write_federation(
        root, data=data, columns=["x", "y"], coordinator_port=free_port(),
        counting_port=free_port(), task_timeout_seconds=120, protections=sorted(PROTECTIONS),
    )
    counting = serve_counting(files)
    coordinator = serve_coordinator(files)
    stop, stop_silent = threading.Event(), threading.Event()
    agents = [_agent(files.participants[pid], stop) for pid in ANSWERING]
    silent = _agent(files.participants[SILENT], stop_silent)
    client = AnalystClient(AnalystConfig(files.coordinator_url, files.analyst_token))
    try:
        client.wait_enrolled([*ANSWERING, SILENT], timeout=60)
        stop_silent.set()
        silent.join(timeout=30)
        spec = JobCreate(algorithm="fedfcm", participants=list(ANSWERING), k_range=(2, 4),
                         seed=3, protection="none")
        job = client.follow(client.submit(spec).id, poll=0.1, timeout=120)
        assert job.state == "succeeded", job.error
        yield Served(
            url=files.coordinator_url, token=files.analyst_token,
            participant_token=ParticipantConfig.from_file(files.participants["a"]).token or "",
            client=client, job=job, result=client.result(job.id),
            ledger=client.disclosures(job.id),
        )
    finally:
        client.close()
        stop.set()
        for agent in agents:
            agent.join(timeout=30)
        coordinator.stop()
        counting.stop()


@dataclass(frozen=True)
class Browser:
    """A page of a fresh browser and the errors it has reported (console or script)."""

    page: Any
    problems: list[str]


@pytest.fixture
def browser(served: Served) -> Iterator[Browser]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(accept_downloads=True)
            page.set_default_timeout(TIMEOUT_MS)
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            yield Browser(page, problems)
        finally:
            browser.close()


def sign_in(page: Any, served: Served, token: str | None = None) -> None:
    page.goto(f"{served.url}/ui")
    page.fill("#token", served.token if token is None else token)
    page.click("#login button[type=submit]")


def api_text(served: Served, path: str) -> str:
    headers = {"Authorization": f"Bearer {served.token}"}
    response = httpx.get(f"{served.url}/api/v1{path}", headers=headers)
    assert response.status_code == 200, response.text
    return response.text


def test_the_dashboard_shows_a_finished_job(served: Served, browser: Browser) -> None:
    page = browser.page
    sign_in(page, served)
    link = page.locator(f'a[href="#job/{served.job.id}"]')
    link.wait_for()
    row = page.locator("#jobs tbody tr", has=link)
    assert row.locator("td.state").inner_text() == "succeeded"
    link.click()

    curve = page.locator("#k-curve path.curve")
    curve.wait_for()
    ks = [e.k for e in served.result.sweep]
    commands = re.findall(r"[ML]", curve.get_attribute("d") or "")
    assert len(commands) == len(ks) == 3
    chosen = page.locator("#k-curve circle.chosen")
    assert chosen.count() == 1
    assert chosen.get_attribute("data-k") == str(served.result.k_selected)
    assert page.locator("#centers-k").inner_text() == str(served.result.k_selected)
    assert page.locator("#centers tbody tr").count() == served.result.k_selected

    page.click('nav a[href="#participants"]')
    participants = page.locator("#participants tbody tr")
    participants.first.wait_for()
    assert participants.count() == len(ANSWERING) + 1
    assert browser.problems == []


def test_a_center_resting_on_one_participant_is_flagged_at_the_center(
    served: Served, browser: Browser
) -> None:
    page = browser.page
    sign_in(page, served)
    page.goto(f"{served.url}/ui/#job/{served.job.id}")
    page.locator("#centers tbody tr").first.wait_for()
    entry = next(e for e in served.result.sweep if e.k == served.result.k_selected)
    assert entry.center_contributors is not None
    single = [j for j, (n, c) in enumerate(zip(entry.center_contributors, entry.centers,
                                                 strict=True)) if n == 1 and c is not None]
    assert single  # "a" alone holds the cluster at (0, 20)
    rows = page.locator("#centers tbody tr")
    flagged = [j for j in range(rows.count()) if "single" in (rows.nth(j).get_attribute("class")
                                                              or "")]
    assert flagged == single
    badge = rows.nth(single[0]).locator(".single-badge")
    assert badge.inner_text() == "one participant"
    assert "rests on one participant" in (badge.get_attribute("title") or "")
    warning = page.locator("#single-warning")
    assert warning.is_visible()
    assert f"{len(single)} center(s)" in warning.inner_text()
    assert "min_center_contributors" in warning.inner_text()
    assert browser.problems == []


def test_the_ledger_is_grouped_by_kind_and_participant(served: Served, browser: Browser) -> None:
    page = browser.page
    sign_in(page, served)
    page.goto(f"{served.url}/ui/#job/{served.job.id}")
    summary = page.locator("#ledger-summary")
    summary.locator("tbody tr").first.wait_for()
    disclosures = served.ledger.disclosures
    parties = list(dict.fromkeys(d.participant for d in disclosures))
    assert parties == list(ANSWERING)
    heads = summary.locator("thead th").all_inner_texts()
    assert heads == ["Kind of task", *parties]

    def label(task_kind: str, reply_kind: str) -> str:
        return task_kind if task_kind == reply_kind else f"{task_kind} → {reply_kind}"

    kinds = list(dict.fromkeys(label(d.task_kind, d.reply_kind) for d in disclosures))
    assert summary.locator("tbody tr").count() == len(kinds)
    for d in disclosures:
        row = summary.locator(f'tbody tr[data-kind="{label(d.task_kind, d.reply_kind)}"]')
        count = row.locator(f'td[data-participant="{d.participant}"]').inner_text()
        assert count.split()[0] == str(d.messages)
        assert {f.protection for f in d.fields} <= set(count.split()[1:])

    details = page.locator("#ledger-parties details.party")
    assert details.count() == len(parties)
    first = details.first
    assert first.get_attribute("open") is None  # collapsed until asked
    table = first.locator("table.party-fields")
    assert not table.is_visible()
    mine = [d for d in disclosures if d.participant == parties[0]]
    total = sum(d.messages for d in mine)
    assert f"{total} message(s) of {len(mine)} kind(s)" in first.locator("summary").inner_text()
    first.locator("summary").click()
    assert table.is_visible()
    assert table.locator("tbody tr").count() == len(mine)
    cells = table.locator("tbody tr").first.locator("td").all_inner_texts()
    assert cells[0] == label(mine[0].task_kind, mine[0].reply_kind)
    assert cells[1] == str(mine[0].messages)
    assert cells[2].split("\n")[0].startswith(mine[0].fields[0].name)
    assert browser.problems == []


def test_a_job_submitted_in_the_browser_finishes_and_downloads(
    served: Served, browser: Browser
) -> None:
    page = browser.page
    sign_in(page, served)
    page.click('nav a[href="#new"]')
    options = page.locator("#algorithm option")
    options.first.wait_for(state="attached")
    assert options.all_inner_texts() == list(algorithms.names())  # the registry, in order
    page.select_option("#algorithm", "fkm")
    page.fill("#k-from", "2")
    page.fill("#k-to", "3")
    page.uncheck(f'#members input[value="{SILENT}"]')
    page.select_option("#protection", "none")
    page.fill("#seed", "11")
    page.click("#submit-job")

    page.wait_for_url(re.compile(r"#job/job-[0-9a-f]+$"))
    job_id = page.url.rsplit("/", 1)[1]
    page.locator("#job-summary dd.state-succeeded").wait_for(timeout=JOB_TIMEOUT_MS)
    job = served.client.job(job_id)
    assert job.spec.algorithm == "fkm" and job.spec.k_range == (2, 3)
    assert job.spec.participants == list(ANSWERING) and job.spec.seed == 11
    assert not page.locator("#cancel-job").is_visible()

    with page.expect_download() as caught:
        page.click('#downloads button[data-file="centers.csv"]')
    download = caught.value
    assert download.suggested_filename == f"{job_id}-centers.csv"
    text = Path(download.path()).read_text(encoding="utf-8")
    assert text == api_text(served, f"/jobs/{job_id}/result/centers.csv")
    result = served.client.result(job_id)
    centers = pd.read_csv(io.StringIO(text))
    chosen = centers[centers["k"] == result.k_selected]
    entry = next(e for e in result.sweep if e.k == result.k_selected)
    np.testing.assert_allclose(chosen[feature_names(result)].to_numpy(),
                               [c for c in entry.centers if c is not None])

    with page.expect_download() as caught:
        page.click('#downloads button[data-file="result.json"]')
    document = Path(caught.value.path()).read_text(encoding="utf-8")
    assert ResultDocument.model_validate_json(document) == result
    assert browser.problems == []


def test_a_running_job_is_cancelled_in_the_browser(served: Served, browser: Browser) -> None:
    page = browser.page
    sign_in(page, served)
    page.goto(f"{served.url}/ui/#new")
    page.locator(f'#members input[value="{SILENT}"]').wait_for()
    page.select_option("#algorithm", "fedfcm")
    page.fill("#k-from", "2")
    page.fill("#k-to", "2")
    page.check(f'#members input[value="{SILENT}"]')  # enrolled, but no longer answering
    page.select_option("#protection", "none")
    page.click("#submit-job")
    page.wait_for_url(re.compile(r"#job/job-[0-9a-f]+$"))
    job_id = page.url.rsplit("/", 1)[1]
    assert served.client.job(job_id).spec.k == 2
    cancel = page.locator("#cancel-job")
    cancel.wait_for()  # shown while the job is pending or running
    assert served.client.job(job_id).state in ("pending", "running")
    opened = page.locator('#ledger-parties details.party[data-participant="a"]')
    opened.locator("summary").click()  # "a" answered the declaration; "d" never will
    page.wait_for_timeout(2.5 * POLL_MS)  # the running job's page is redrawn meanwhile
    assert opened.get_attribute("open") is not None  # and keeps what the reader opened
    assert served.client.job(job_id).state in ("pending", "running")
    cancel.click()
    page.locator("#job-summary dd.state-cancelled").wait_for()
    assert served.client.job(job_id).state == "cancelled"
    assert not cancel.is_visible()
    assert browser.problems == []


def test_a_token_without_the_analyst_scope_is_told_so(served: Served, browser: Browser) -> None:
    page = browser.page
    sign_in(page, served, served.participant_token)
    error = page.locator("#error")
    sync_api.expect(error).to_contain_text("lack the analyst scope")  # the job list: 403
    assert "this operation needs an analyst token" in error.inner_text()
    page.click('nav a[href="#new"]')
    page.wait_for_url(re.compile(r"#new$"))
    sync_api.expect(error).to_contain_text("lack the analyst scope")  # the algorithms: 403
    assert page.locator("#algorithm option").count() == 0


def test_a_wrong_token_is_refused(served: Served, browser: Browser) -> None:
    page = browser.page
    sign_in(page, served, "not-the-analyst-token")
    error = page.locator("#error")
    error.wait_for()
    assert "sign in again" in error.inner_text()
    assert page.locator("#login-view").is_visible()
    assert page.evaluate("sessionStorage.length") == 0


def test_under_mutual_tls_the_browser_reaches_the_dashboard_with_the_p12(
    tmp_path: Path,
) -> None:
    """The README's steps: the analyst's certificate exported with ``fedclust pki`` as
    PKCS#12 is what the browser presents; without it the handshake is refused."""
    for pid in ANSWERING:
        (tmp_path / f"{pid}.csv").write_text("x,y\n0,0\n", encoding="utf-8")
    files = write_federation(
        tmp_path, data={pid: f"{pid}.csv" for pid in ANSWERING}, columns=["x", "y"],
        coordinator_port=free_port(), counting_port=free_port(), tls="mutual",
    )
    passphrase = "dashboard passphrase"
    bundle = export_p12("analyst", tmp_path / "pki", tmp_path / "pki", passphrase.encode())
    settings = CoordinatorSettings.from_file(files.coordinator)
    port = int(files.coordinator_url.rsplit(":", 1)[1])
    server = ServerThread(
        create_coordinator(settings), port, **settings.tls.uvicorn_options()
    ).start()
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                bare = browser.new_page(ignore_https_errors=True)
                with pytest.raises(sync_api.Error):
                    bare.goto(f"{files.coordinator_url}/ui/", timeout=TIMEOUT_MS)
                context = browser.new_context(
                    ignore_https_errors=True,
                    client_certificates=[{"origin": files.coordinator_url,
                                          "pfxPath": str(bundle), "passphrase": passphrase}],
                )
                page = context.new_page()
                page.set_default_timeout(TIMEOUT_MS)
                page.goto(f"{files.coordinator_url}/ui/")
                page.fill("#token", files.analyst_token)
                page.click("#login button[type=submit]")
                page.locator("#jobs-empty").wait_for()  # the API answered: no jobs yet
                assert not page.locator("#error").is_visible()
            finally:
                browser.close()
    finally:
        server.stop()
