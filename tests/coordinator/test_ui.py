"""The dashboard at /ui and the API documentation pages: served locally, nothing from a CDN,
and the participants' last contact in the analysts' participant list."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fedclust.coordinator.api.ui import UI_DIR
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    FakeCounting,
    auth,
    enrol,
    running_app,
    token,
)

ASSETS = {"index.html": "text/html", "app.js": "javascript", "style.css": "text/css"}
# Any absolute http(s) URL; the SVG namespace is a name, never fetched.
EXTERNAL = re.compile(r"https?://(?!www\.w3\.org/2000/svg\b)[^\s\"'<>)]+")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path, FakeCounting()) as c:
        yield c


def test_the_shipped_files_name_no_external_url() -> None:
    shipped = sorted(p for p in UI_DIR.iterdir() if p.is_file())
    assert {p.name for p in shipped} == set(ASSETS)
    found = {p.name: EXTERNAL.findall(p.read_text(encoding="utf-8")) for p in shipped}
    assert found == {name: [] for name in ASSETS}


def test_ui_redirects_to_its_folder_and_serves_the_page(client: TestClient) -> None:
    redirect = client.get("/ui", follow_redirects=False)
    assert redirect.status_code in (307, 308)
    assert redirect.headers["location"].endswith("/ui/")
    page = client.get("/ui/")  # static, public: no data without the analyst token
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert 'id="login"' in page.text and 'src="app.js"' in page.text


@pytest.mark.parametrize(("name", "kind"), sorted(ASSETS.items()))
def test_each_asset_is_served_same_origin_only(client: TestClient, name: str, kind: str) -> None:
    response = client.get(f"/ui/{name}")
    assert response.status_code == 200
    assert kind in response.headers["content-type"]
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.text == (UI_DIR / name).read_text(encoding="utf-8")


def test_an_unknown_ui_file_is_404(client: TestClient) -> None:
    assert client.get("/ui/missing.js").status_code == 404


def test_the_script_authenticates_every_api_call() -> None:
    script = (UI_DIR / "app.js").read_text(encoding="utf-8")
    assert script.count("fetch(") == 1  # the one helper, which sets the bearer header
    assert 'Authorization: "Bearer " + token()' in script
    assert "sessionStorage" in script and "localStorage" not in script
    assert "innerHTML" not in script


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_api_docs_load_local_assets_only(client: TestClient, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', response.text)
    assert assets and all(a.startswith("/docs-assets/") for a in assets), assets
    assert "//" not in "".join(re.findall(r"url: '([^']*)'", response.text))
    for asset in assets:
        assert client.get(asset).status_code == 200, asset


def test_openapi_stays_public_and_excludes_the_pages(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert f"{API}/jobs" in paths
    assert not {"/ui", "/docs", "/redoc"} & set(paths)


def test_participants_list_their_last_contact(client: TestClient) -> None:
    def listed() -> dict[str, datetime | None]:
        response = client.get(f"{API}/participants", headers=ANALYST)
        assert response.status_code == 200
        return {
            p["id"]: None if p["last_contact"] is None else datetime.fromisoformat(
                p["last_contact"]
            )
            for p in response.json()
        }

    assert set(listed().values()) == {None}
    before = datetime.now(UTC)
    enrol(client, NAMES[0])
    first = listed()[NAMES[0]]
    assert first is not None and before <= first <= datetime.now(UTC)
    assert listed()[NAMES[1]] is None
    # Any authenticated request counts; a refused token does not.
    client.get(f"{API}/tasks/next", params={"wait": 0}, headers=auth(token(NAMES[1])))
    client.get(f"{API}/tasks/next", params={"wait": 0}, headers=auth("not-a-token"))
    after = listed()
    polled = after[NAMES[1]]
    assert polled is not None and polled >= first
    assert after[NAMES[2]] is None
