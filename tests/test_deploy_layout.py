"""The container layout of deploy/: compose.yaml's services run as local processes.

Each service of ``deploy/compose.yaml`` is started the way its container would be: the
image's entry point (``python -m fedclust``) with the service's ``command``, working directory
``/var/lib/fedclust`` (the Dockerfile's ``WORKDIR``), its ``volumes``, ``secrets`` and
``environment``:

- bind mounts (``./examples/...``, ``./data/...``) and secrets (``./secrets/...``, at
  ``/run/secrets/NAME``) are copied into a per-service folder and made read-only (files
  0444, folders 0555) like the ``:ro`` mounts;
- named volumes become writable temporary folders;
- the ``environment`` variables are set, their container paths remapped.

The remapping is explicit and minimal: container paths are replaced by their folders (longest
prefix first), service host names by 127.0.0.1 with free ports, and the examples'
``REPLACE-WITH-...`` placeholders by fresh tokens and their SHA-256. Nothing else in the files
changes. A masked job then runs to completion, and afterwards no read-only folder has gained,
lost or changed a file (compared by listing, size and mtime: this also holds as root, for
whom permissions do not stop a write).

Also: ``docker compose config`` (or ``docker-compose config``) validates compose.yaml, and
``helm template`` renders deploy/helm/fedclust, each where the tool is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from fedclust.demo import free_port

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
CHART = DEPLOY / "helm" / "fedclust"
WORKDIR = "/var/lib/fedclust"  # the Dockerfile's WORKDIR (a volume)
SERVICE_URLS = {"coordinator": "http://coordinator:8700", "counting": "http://counting:8701"}
_PLACEHOLDER = re.compile(r"REPLACE-WITH-(SHA256-OF-)?([A-Z0-9-]+?)-TOKEN")


@dataclass
class Service:
    """One compose service laid out on the local file system."""

    name: str
    command: list[str]
    root: Path
    mounts: dict[str, Path] = field(default_factory=dict)  # container path -> local path
    read_only: list[Path] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    healthcheck: list[str] = field(default_factory=list)  # the command after "CMD"

    def local(self, text: str) -> str:
        """``text`` with every container path of a mount replaced, longest first."""
        for container in sorted(self.mounts, key=len, reverse=True):
            text = text.replace(container, str(self.mounts[container]))
        return text


class Layout:
    """compose.yaml's services, their mounts and the substitutions of the remapping."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ports = {name: free_port() for name in SERVICE_URLS}
        self.tokens: dict[str, str] = {}
        compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
        self.secrets: dict[str, Any] = compose.get("secrets", {})
        self.services = [self._service(n, s) for n, s in compose["services"].items()]

    def token(self, holder: str) -> str:
        return self.tokens.setdefault(holder, secrets.token_urlsafe(32))

    def _placeholder(self, found: re.Match[str]) -> str:
        value = self.token(found.group(2).lower())
        return hashlib.sha256(value.encode()).hexdigest() if found.group(1) else value

    def rewrite(self, service: Service, text: str) -> str:
        """The explicit remapping of one config file (module docstring)."""
        text = _PLACEHOLDER.sub(self._placeholder, text)
        for name, url in SERVICE_URLS.items():
            text = text.replace(url, f"http://127.0.0.1:{self.ports[name]}")
        if service.name in self.ports:
            text = text.replace('host = "0.0.0.0"', 'host = "127.0.0.1"')
            text = re.sub(r"(?m)^port = \d+", f"port = {self.ports[service.name]}", text)
        return service.local(text)

    def _service(self, name: str, spec: dict[str, Any]) -> Service:
        service = Service(name, list(spec["command"]), self.tmp / name)
        if "healthcheck" in spec:
            test = list(spec["healthcheck"]["test"])
            assert test[0] == "CMD", f"{name}: the healthcheck is not an exec form"
            service.healthcheck = test[1:]
        files: list[tuple[Path, str]] = []
        for volume in spec["volumes"]:
            source, target, *mode = volume.split(":")
            if source.startswith("./"):
                local = service.root / target.lstrip("/")
                service.mounts[target] = local
                files.append((DEPLOY / source, target))
                assert mode == ["ro"], f"{name}: bind mount {source} is not read-only"
            else:
                local = self.tmp / "volumes" / source
                local.mkdir(parents=True, exist_ok=True)
                service.mounts[target] = local
        for secret in spec.get("secrets", []):  # compose mounts each at /run/secrets/NAME
            target = f"/run/secrets/{secret}"
            service.mounts[target] = service.root / target.lstrip("/")
            files.append((DEPLOY / self.secrets[secret]["file"], target))
        assert WORKDIR in service.mounts, f"{name}: {WORKDIR} (WORKDIR) is not a volume"
        service.environment = {
            key: service.local(str(value)) for key, value in spec.get("environment", {}).items()
        }
        for source, target in files:
            local = service.mounts[target]
            local.parent.mkdir(parents=True, exist_ok=True)
            if source.suffix == ".toml" or target.startswith("/run/secrets/"):
                local.write_text(self.rewrite(service, source.read_text("utf-8")), "utf-8")
            else:  # a participant's data share (deploy/data is the operator's)
                _write_share(local, seed=sum(map(ord, name)))
            if local.parent not in service.read_only:
                service.read_only.append(local.parent)
        return service

    def freeze(self) -> None:
        """Make every bind-mounted folder read-only (files 0444, folders 0555)."""
        for service in self.services:
            for folder in service.read_only:
                for path in folder.iterdir():
                    path.chmod(0o444)
                folder.chmod(0o555)

    def read_only_snapshot(self) -> dict[str, tuple[int, int, int]]:
        """Every entry of the read-only folders: (size, mtime in ns, mode)."""
        snapshot = {}
        for service in self.services:
            for folder in service.read_only:
                for path in [folder, *sorted(folder.rglob("*"))]:
                    stat = path.lstat()
                    snapshot[str(path)] = (stat.st_size, stat.st_mtime_ns, stat.st_mode)
        return snapshot


def _write_share(path: Path, *, seed: int) -> None:
    """Two blobs in the examples' columns x, y (every share a different size)."""
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [4.0, 4.0]])
    labels = rng.integers(0, 2, size=40 + 3 * seed)
    rows = centers[labels] + rng.normal(scale=0.5, size=(labels.size, 2))
    lines = ["x,y", *(f"{a:.6f},{b:.6f}" for a, b in rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[Layout]:
    laid = Layout(tmp_path)
    yield laid
    for service in laid.services:  # let pytest remove the folders
        for folder in service.read_only:
            folder.chmod(0o755)
            for path in folder.iterdir():
                path.chmod(0o644)


def _environment(service: Service) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDCLUST_")}
    env.update(service.environment, FEDCLUST_LOG_FORMAT="json")
    return env


def _healthy(service: Service) -> subprocess.CompletedProcess[str]:
    """Run the service's compose healthcheck as the container would (``python``: this one)."""
    command = [service.local(arg) for arg in service.healthcheck]
    assert command[0] == "python", command
    return subprocess.run(
        [sys.executable, *command[1:]], cwd=service.mounts[WORKDIR], env=_environment(service),
        capture_output=True, text=True, timeout=60, check=False,
    )


def _start(layout: Layout, service: Service) -> subprocess.Popen[bytes]:
    command = [service.local(arg) for arg in service.command]
    log = (layout.tmp / f"{service.name}.log").open("wb")
    env = _environment(service)
    with log:
        return subprocess.Popen(
            [sys.executable, "-m", "fedclust", *command],
            cwd=service.mounts[WORKDIR], stdout=log, stderr=subprocess.STDOUT, env=env,
        )


def _alive(procs: dict[str, subprocess.Popen[bytes]], layout: Layout) -> None:
    """Fail with its log when a process has exited (an agent crash-looping in a container)."""
    for name, proc in procs.items():
        if proc.poll() is not None:
            log = (layout.tmp / f"{name}.log").read_text("utf-8", errors="replace")
            pytest.fail(f"{name} exited with {proc.returncode}:\n{log[-3000:]}")


def _wait(url: str, procs: dict[str, subprocess.Popen[bytes]], layout: Layout) -> None:
    deadline = time.monotonic() + 60
    while True:
        _alive(procs, layout)
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer 200 within 60 s"
        time.sleep(0.1)


def test_compose_layout_runs_a_job_with_read_only_configs(layout: Layout) -> None:
    layout.freeze()
    frozen = layout.read_only_snapshot()
    coordinator = f"http://127.0.0.1:{layout.ports['coordinator']}"
    counting = f"http://127.0.0.1:{layout.ports['counting']}"
    analyst = {"Authorization": f"Bearer {layout.token('alice')}"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        # All at once, as `docker compose up` may: the agents retry until the services answer.
        for service in layout.services:
            procs[service.name] = _start(layout, service)
        _wait(f"{counting}/readyz", procs, layout)
        _wait(f"{coordinator}/readyz", procs, layout)
        checked = [service for service in layout.services if service.healthcheck]
        assert {service.name for service in checked} == {"counting", "coordinator"}
        for service in checked:
            result = _healthy(service)
            assert result.returncode == 0, (service.name, result.stderr)
        deadline = time.monotonic() + 60
        while True:
            listed = httpx.get(f"{coordinator}/api/v1/participants", headers=analyst).json()
            if all(p["enrolled"] for p in listed):
                break
            _alive(procs, layout)
            assert time.monotonic() < deadline, f"not every agent enrolled: {listed}"
            time.sleep(0.2)
        ids = [p["id"] for p in listed]
        assert ids == ["hospital-a", "hospital-b", "hospital-c"]
        created = httpx.post(
            f"{coordinator}/api/v1/jobs", headers=analyst,
            json={"algorithm": "fedfcm", "participants": ids, "k": 2, "seed": 3},
        )
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        deadline = time.monotonic() + 120
        while (job := httpx.get(f"{coordinator}/api/v1/jobs/{job_id}", headers=analyst).json())[
            "state"
        ] in ("pending", "running"):
            _alive(procs, layout)
            assert time.monotonic() < deadline, f"job still {job['state']}: {job['progress']}"
            time.sleep(0.2)
        assert job["state"] == "succeeded", job["error"]
        assert job["spec"]["protection"] == "masking"  # identity keys, job keys, audit lines
        assert httpx.get(f"{coordinator}/metrics").status_code == 404  # metrics = false
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    after = layout.read_only_snapshot()
    written = sorted(p for p in set(after) | set(frozen) if after.get(p) != frozen.get(p))
    assert not written, f"written into a read-only mount: {written}"
    # the state the read-only configs send elsewhere is on the services' volumes
    volumes = layout.tmp / "volumes"
    assert (volumes / "coordinator-data" / "coordinator.db").is_file()
    assert (volumes / "counting-data" / "counting.db").is_file()
    for state in ("participant-a-state", "participant-b-state", "participant-c-state"):
        names = {p.name for p in (volumes / state).iterdir()}
        assert {"audit.jsonl", "identity.key", "state"} <= names, (state, names)
    # FEDCLUST_LOG_FORMAT=json: every line every service wrote is one JSON object
    for name in procs:
        for line in (layout.tmp / f"{name}.log").read_text("utf-8").splitlines():
            record = json.loads(line)
            assert {"timestamp", "level", "logger", "message"} <= set(record), line
            assert not any(token in line for token in layout.tokens.values()), line


def test_every_state_path_of_the_configs_is_on_a_volume(layout: Layout) -> None:
    """No config names a writable path under its own read-only mount."""
    for service in layout.services:
        for target, local in service.mounts.items():
            if local.suffix != ".toml":
                continue
            text = local.read_text("utf-8")
            for key in ("database_url", "state_dir", "audit_log", "identity_key"):
                for value in re.findall(rf'(?m)^{key} = "([^"]+)"', text):
                    path = Path(value.removeprefix("sqlite:///"))
                    assert path.is_absolute(), f"{service.name}: {key} {value} is relative"
                    assert not any(path.is_relative_to(ro) for ro in service.read_only), (
                        f"{service.name}: {key} = {value} is under a read-only mount"
                    )
            if "[participant]" in text:
                for key in ("state_dir", "audit_log", "identity_key"):
                    assert re.search(rf"(?m)^{key} = ", text), f"{target}: {key} not set"


def _compose_command() -> list[str] | None:
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        probe = subprocess.run([*command, "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return command
    return None


def test_docker_compose_config_validates(tmp_path: Path) -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    project = tmp_path / "deploy"
    shutil.copytree(DEPLOY, project, ignore=shutil.ignore_patterns("helm", "openapi"))
    result = subprocess.run(
        [*command, "-f", str(project / "compose.yaml"), "config"],
        capture_output=True, text=True, check=False, cwd=project,
    )
    assert result.returncode == 0, result.stderr
    rendered = yaml.safe_load(result.stdout)
    assert set(rendered["services"]) == {
        "counting", "coordinator", "participant-a", "participant-b", "participant-c"
    }


def test_helm_chart_renders(tmp_path: Path) -> None:
    if shutil.which("helm") is None:
        pytest.skip("helm is not installed")
    rendered: dict[str, list[dict[str, Any]]] = {}
    configs = {name: tmp_path / f"{name}.toml" for name in ("coordinator", "counting", "p")}
    for name, path in configs.items():
        path.write_text(f"# {name}: TOML from a file\n", encoding="utf-8")
    for release, values in (
        ("services", ["--set-file", f"coordinator.config={configs['coordinator']}",
                      "--set", "counting.existingSecret=counting-toml"]),
        ("hospital-a", ["--set", "coordinator.enabled=false", "--set", "counting.enabled=false",
                        "--set", "participant.enabled=true",
                        "--set-file", f"participant.config={configs['p']}",
                        "--set", "participant.data.existingClaim=hospital-a-data"]),
    ):
        result = subprocess.run(
            ["helm", "template", release, str(CHART), *values],
            capture_output=True, text=True, check=False,
        )
        assert result.returncode == 0, result.stderr
        rendered[release] = [d for d in yaml.safe_load_all(result.stdout) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in rendered["services"]}
    assert ("Deployment", "services-fedclust-coordinator") in kinds
    assert ("Deployment", "services-fedclust-counting") in kinds
    assert not any("participant" in name for _, name in kinds)
    assert ("Secret", "services-fedclust-coordinator") in kinds
    assert ("Secret", "services-fedclust-counting") not in kinds  # the existing one is used
    for doc in rendered["services"]:
        if doc["kind"] == "Deployment":
            container = doc["spec"]["template"]["spec"]["containers"][0]
            component = doc["metadata"]["labels"]["app.kubernetes.io/component"]
            probe = ["python", "-m", "fedclust.probe",
                     "coordinator" if component == "coordinator" else "counter",
                     "--config", f"/etc/fedclust/{component}.toml"]
            assert container["readinessProbe"]["exec"]["command"] == probe
            assert container["livenessProbe"]["exec"]["command"] == [*probe, "--live"]
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
    agent = [d for d in rendered["hospital-a"] if d["kind"] == "StatefulSet"]
    assert len(agent) == 1
    mounts = {m["mountPath"]: m for m in agent[0]["spec"]["template"]["spec"]["containers"][0][
        "volumeMounts"]}
    assert mounts["/etc/fedclust"]["readOnly"] and mounts["/data"]["readOnly"]
    assert not mounts["/var/lib/fedclust"].get("readOnly", False)


def test_helm_chart_files_parse() -> None:
    """Where helm is missing, at least the chart's plain YAML files parse."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text("utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text("utf-8"))
    assert chart["apiVersion"] == "v2" and chart["name"] == "fedclust"
    assert {"coordinator", "counting", "participant"} <= set(values)
    for template in sorted((CHART / "templates").iterdir()):
        text = template.read_text("utf-8")
        opened = len(re.findall(r"\{\{-?\s*(?:if|range|with|define)\b", text))
        closed = len(re.findall(r"\{\{-?\s*end\s*-?\}\}", text))
        assert opened == closed, f"{template.name}: {opened} blocks opened, {closed} ended"
