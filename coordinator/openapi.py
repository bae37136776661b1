"""Print the coordinator's OpenAPI document: ``python -m fedclust.coordinator.openapi > FILE``."""

from __future__ import annotations

import json
import sys

from fedclust.coordinator.app import openapi_document


def render() -> str:
    """The document as stored in ``deploy/openapi/coordinator.json``."""
    return json.dumps(openapi_document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
