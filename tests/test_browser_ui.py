"""The dashboard in a real headless Chromium against a real coordinator on a loopback socket.

A FedFCM job is run to completion through the real apps and agents (in process); a
coordinator is then started with uvicorn on that job's database, and the browser signs in
with the analyst token, opens the finished job and reads the K curve, the centers and the
disclosure ledger the page drew. The distribution's chromium is driven by Playwright (never
``playwright install``); without either, the test skips.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from fedclust.client import AnalystConfig
from fedclust.coordinator.app import create_app
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.data.federations import build_federation
from fedclust.inprocess import run_in_process
from fedclust.protocol.wire.messages import DisclosureLedger, JobCreate, JobPublic, ResultDocument
from tests._servers import ServerThread

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
TIMEOUT_MS = 30_000

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).is_file(),
    reason="no chromium at /usr/bin/chromium (apt-get install chromium) for the browser test",
)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the browser test needs playwright (the dev extra)"
)


@dataclass(frozen=True)
class Served:
    """A coordinator on a socket holding one finished job."""

    url: str
    token: str
    job: JobPublic
    result: ResultDocument
    ledger: DisclosureLedger


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("dashboard")
    spec = JobCreate(algorithm="fedfcm", participants=["a", "b", "c"], k_range=(2, 6), seed=3,
                     standardise=True, protection="none")
    result = run_in_process(build_federation(dataset="motivational", seed=2), spec, workdir=root)
    token = AnalystConfig.from_file(root / "analyst.toml").token
    app = create_app(CoordinatorSettings.from_file(root / "coordinator.toml"))
    server = ServerThread(app, 0).start()
    url = f"http://127.0.0.1:{server.port}"
    try:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=f"{url}/api/v1", headers=headers) as api:
            (job,) = [JobPublic.model_validate(j) for j in api.get("/jobs").json()]
            ledger = DisclosureLedger.model_validate(api.get(f"/jobs/{job.id}/disclosures").json())
        yield Served(url=url, token=token, job=job, result=result, ledger=ledger)
    finally:
        server.stop()


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
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            yield Browser(page, problems)
        finally:
            browser.close()


def test_the_dashboard_shows_a_finished_job(served: Served, browser: Browser) -> None:
    page = browser.page
    page.goto(f"{served.url}/ui")
    page.fill("#token", served.token)
    page.click("#login button[type=submit]")
    link = page.locator(f'a[href="#job/{served.job.id}"]')
    link.wait_for()
    row = page.locator("#jobs tbody tr", has=link)
    assert row.locator("td.state").inner_text() == "succeeded"
    link.click()

    curve = page.locator("#k-curve path.curve")
    curve.wait_for()
    ks = [e.k for e in served.result.sweep]
    commands = re.findall(r"[ML]", curve.get_attribute("d") or "")
    assert len(commands) == len(ks) == 5
    chosen = page.locator("#k-curve circle.chosen")
    assert chosen.count() == 1
    assert chosen.get_attribute("data-k") == str(served.result.k_selected)
    assert page.locator("#centers-k").inner_text() == str(served.result.k_selected)
    assert page.locator("#centers tbody tr").count() == served.result.k_selected

    ledger_rows = page.locator("#ledger tbody tr")
    assert ledger_rows.count() == len(served.ledger.disclosures) > 0
    first = served.ledger.disclosures[0]
    cells = ledger_rows.first.locator("td").all_inner_texts()
    assert cells[:3] == [first.participant, first.task_kind, first.reply_kind]
    assert cells[4] == str(first.messages)

    page.click('nav a[href="#participants"]')
    participants = page.locator("#participants tbody tr")
    participants.first.wait_for()
    assert participants.count() == 3
    assert browser.problems == []


def test_a_wrong_token_is_refused(served: Served, browser: Browser) -> None:
    page = browser.page
    page.goto(f"{served.url}/ui/")
    page.fill("#token", "not-the-analyst-token")
    page.click("#login button[type=submit]")
    error = page.locator("#error")
    error.wait_for()
    assert "sign in again" in error.inner_text()
    assert page.locator("#login-view").is_visible()
    assert page.evaluate("sessionStorage.length") == 0
