"""`Table`: rows under column names, printed aligned, for the notebooks' one-liners."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    """Rows of values under column names; ``str()`` aligns them (one line per row, <= 100 chars).

    ``formats`` maps a column to a format spec (e.g. ".3f"); other cells use ``str``.
    ``column(name)`` gives one column's raw values (what the tests look at).
    """

    columns: list
    rows: list
    formats: dict = field(default_factory=dict)
    title: str = ""

    def column(self, name: str) -> list:
        k = self.columns.index(name)
        return [row[k] for row in self.rows]

    def _cell(self, name, value) -> str:
        spec = self.formats.get(name, "")
        if isinstance(value, list):
            return "[" + ", ".join(format(v, spec) for v in value) + "]"
        return format(value, spec) if spec and value is not None else str(value)

    def __str__(self) -> str:
        cells = [[self._cell(c, v) for c, v in zip(self.columns, row)] for row in self.rows]
        widths = [max([len(c)] + [len(r[k]) for r in cells]) for k, c in enumerate(self.columns)]
        line = lambda vals: " | ".join(v.rjust(w) if k else v.ljust(w)  # noqa: E731
                                       for k, (v, w) in enumerate(zip(vals, widths))).rstrip()
        out = ([self.title] if self.title else []) + [line(self.columns)] + [line(r) for r in cells]
        return "\n".join(out)

    def __repr__(self) -> str:
        return str(self)
