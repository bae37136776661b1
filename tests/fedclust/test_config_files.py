"""fedclust.config_files: TOML written here reads back equal with tomllib; credentials."""

from __future__ import annotations

import hashlib
import stat
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedclust.config_files import (
    Document,
    analyst_config,
    coordinator_config,
    counting_config,
    dumps,
    new_credential,
    participant_config,
    token_sha256,
    write_federation,
)
from fedclust.protocol import algorithms


def test_round_trip_of_every_value_kind() -> None:
    doc: Document = {
        "service": {
            "name": "coordinator", "port": 8700, "ratio": 0.1, "tiny": 1e-300, "big": 1e300,
            "neg": -2.5, "on": True, "off": False, "zero": 0, "empty": "", "list": ["a", "b"],
            "no_items": [],
        },
        "people": [{"id": "a", "n": 1}, {"id": "b", "n": 2}],
    }
    assert tomllib.loads(dumps(doc)) == doc


def test_bool_is_written_as_bool_not_int() -> None:
    text = dumps({"t": {"flag": True}})
    assert "flag = true" in text
    assert tomllib.loads(text)["t"]["flag"] is True


def test_escaping_of_quotes_backslashes_and_control_characters() -> None:
    nasty = 'a "quoted" \\ path\\to\nnew\tline\r\b\f\x00\x1f\x7f ünïcode ✓ """'
    doc: Document = {"t": {"s": nasty, "xs": [nasty, "'"], "odd key = ]": "v"}}
    text = dumps(doc)
    assert tomllib.loads(text) == doc
    assert "\n" not in text.split("\n", 2)[1]  # the newline inside the value was escaped


@given(st.text(max_size=50), st.integers(-(2**63), 2**63 - 1),
       st.floats(allow_nan=False), st.lists(st.text(max_size=10), max_size=5))
def test_round_trip_property(s: str, i: int, x: float, xs: list[str]) -> None:
    doc: Document = {"t": {"s": s, "i": i, "x": x, "xs": xs}, "a": [{"s": s}]}
    assert tomllib.loads(dumps(doc)) == doc


def test_non_finite_floats() -> None:
    back = tomllib.loads(dumps({"t": {"a": float("inf"), "b": float("-inf")}}))
    assert back["t"] == {"a": float("inf"), "b": float("-inf")}


@pytest.mark.parametrize("value", [None, [1, 2], {"nested": 1}, b"bytes"])
def test_unsupported_values_are_refused(value: object) -> None:
    with pytest.raises(TypeError, match=r"t\.v must be"):
        dumps({"t": {"v": value}})  # type: ignore[dict-item]


def test_credentials_are_random_and_hashed() -> None:
    a, b = new_credential(), new_credential()
    assert a.token != b.token
    assert len(a.token) >= 43  # 32 random bytes in URL-safe base64
    assert a.token_sha256 == hashlib.sha256(a.token.encode()).hexdigest()
    assert token_sha256(a.token) == a.token_sha256
    assert a.token not in repr(a)
    with pytest.raises(ValueError, match="non-empty"):
        token_sha256("")


def test_the_three_config_kinds_have_the_documented_keys() -> None:
    coord = tomllib.loads(dumps(coordinator_config(
        host="127.0.0.1", port=8700, database_url="sqlite:///coordinator.db",
        counting_url="http://127.0.0.1:8701", counting_token="tok",
        analysts={"alice": "0" * 64}, participants={"hospital-a": "1" * 64},
    )))
    assert coord["coordinator"]["port"] == 8700
    assert coord["analysts"] == [{"name": "alice", "token_sha256": "0" * 64}]
    assert coord["participants"] == [{"id": "hospital-a", "token_sha256": "1" * 64}]
    count = tomllib.loads(dumps(counting_config(
        host="127.0.0.1", port=8701, database_url="sqlite:///counting.db",
        coordinator_token_sha256="2" * 64, participants={"hospital-a": "1" * 64},
    )))
    assert count["counting"]["min_participants"] == 3
    part = tomllib.loads(dumps(participant_config(
        participant_id="hospital-a", coordinator_url="http://c", counting_url="http://n",
        token="t", state_dir="state", data_path="a.csv", columns=["x", "y"],
    )))
    assert part["data"] == {"path": "a.csv", "columns": ["x", "y"]}
    assert part["policy"]["allowed_algorithms"] == list(algorithms.names())
    assert tomllib.loads(dumps(analyst_config(coordinator_url="http://c", token="t"))) == {
        "analyst": {"coordinator_url": "http://c", "token": "t"}
    }


def test_write_federation_links_tokens_and_hashes(tmp_path: Path) -> None:
    files = write_federation(
        tmp_path, data={"a": "a.csv", "b": "b.csv", "c": "c.csv"},
        coordinator_port=9000, counting_port=9001,
    )

    def load(p: Path) -> dict[str, object]:
        with p.open("rb") as fh:
            return tomllib.load(fh)

    coord, count, client = load(files.coordinator), load(files.counting), load(files.analyst)
    parts = {pid: load(path) for pid, path in files.participants.items()}
    c = coord["coordinator"]
    assert isinstance(c, dict) and isinstance(count["counting"], dict)
    assert count["counting"]["coordinator_token_sha256"] == token_sha256(c["counting_token"])
    assert coord["analysts"] == [{"name": "analyst", "token_sha256": token_sha256(
        files.analyst_token)}]
    assert client == {"analyst": {"coordinator_url": "http://127.0.0.1:9000",
                                  "token": files.analyst_token}}
    for pid, doc in parts.items():
        section = doc["participant"]
        assert isinstance(section, dict)
        entry = {"id": pid, "token_sha256": token_sha256(section["token"])}
        assert entry in coord["participants"]  # type: ignore[operator]
        assert entry in count["participants"]  # type: ignore[operator]
        assert section["coordinator_url"] == "http://127.0.0.1:9000"
        assert section["counting_url"] == "http://127.0.0.1:9001"
        assert section["audit_log"] == f"audit-{pid}.jsonl"  # beside the configs
    # files that hold a token are readable by their owner only
    for path in (files.coordinator, files.analyst, *files.participants.values()):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_write_federation_opts_its_participants_in_to_protections(tmp_path: Path) -> None:
    """By default the participants refuse unprotected jobs; a federation whose parties one
    user plays (the demo, the in-process service) opts in to the protection it runs."""
    default = write_federation(tmp_path / "d", data={"a": "a.csv"}, coordinator_port=9000,
                               counting_port=9001)
    opted = write_federation(tmp_path / "o", data={"a": "a.csv"}, coordinator_port=9000,
                             counting_port=9001, protections=["none", "masking"])
    with default.participants["a"].open("rb") as fh:
        assert "protections" not in tomllib.load(fh)["policy"]  # the policy's default
    with opted.participants["a"].open("rb") as fh:
        assert tomllib.load(fh)["policy"]["protections"] == ["masking", "none"]
