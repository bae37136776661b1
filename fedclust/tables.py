"""Terminal tables: a ``rich`` table rendered to plain text.

No colours, no escape codes, no markup and no wrapping, whatever the terminal: a table prints
the same on a terminal, into a file and in a test. ``rich`` is imported on the first table, so
``fedclust --version`` and ``--help`` never load it.
"""

from __future__ import annotations

import io
from collections.abc import Collection, Iterable, Sequence

#: The console width a table is laid out in: wide enough that no table is squeezed or
#: wrapped (a table is only as wide as its cells; nothing is padded to this width).
_WIDTH = 1_000_000


def render_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    numeric: Collection[int] = (),
    indent: int = 0,
) -> str:
    """``rows`` (already formatted cells, one per header) under ``headers``, a rule under the
    header row, as lines of text without trailing spaces; the columns whose index is in
    ``numeric`` right-aligned, the others left-aligned; every line indented by ``indent``
    spaces."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False)
    for i, header in enumerate(headers):
        table.add_column(header, justify="right" if i in numeric else "left", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    out = io.StringIO()
    Console(
        file=out, width=_WIDTH, color_system=None, force_terminal=False, markup=False,
        emoji=False, highlight=False, legacy_windows=False,
    ).print(table)
    pad = " " * indent
    return "\n".join(pad + line.rstrip() for line in out.getvalue().splitlines())
