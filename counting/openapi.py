"""Export the counting service's OpenAPI document: ``python -m fedclust.counting.openapi``.

The document is written to ``deploy/openapi/counting.json`` (or ``--output FILE``);
``--check`` exits 1 when the file differs from the live app's document instead of writing.
A test (``tests/counting/test_openapi.py``) fails when the two differ, so the file in the
repository is what integrators generate clients from.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedclust.counting.app import create_app
from fedclust.counting.settings import CountingSettings

__all__ = ["DEFAULT_PATH", "main", "openapi_document", "render"]

DEFAULT_PATH = Path(__file__).resolve().parents[1] / "deploy" / "openapi" / "counting.json"


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the app (it does not depend on the settings' values)."""
    app = create_app(
        CountingSettings(coordinator_token_sha256="0" * 64, database_url="sqlite://")
    )
    try:
        return app.openapi()
    finally:
        app.state.store.close()


def render(document: dict[str, Any]) -> str:
    """The document as the file holds it: indented JSON, UTF-8, a final newline."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fedclust.counting.openapi",
        description="Export the counting service's OpenAPI.",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_PATH, help="file to write")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs; write nothing"
    )
    args = parser.parse_args(argv)
    document = openapi_document()
    out: Path = args.output
    if args.check:
        try:
            current = json.loads(out.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            current = None
        if current != document:
            print(f"{out} is out of date; run python -m fedclust.counting.openapi", file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(document), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
