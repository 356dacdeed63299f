"""Show the code a lab teaches: ``show(obj)`` gives its file:line and source.

Works for functions, methods, classes, modules and ``@triton.jit`` kernels
(their Python body), from labkit, exercises/, solutions/ or a notebook cell.
In Jupyter the result renders highlighted; printed, it is plain text. A
``str`` is shown as it is (e.g. pseudo-code kept next to a simulator).

    from labkit.show import show
    show(labkit.kernels.add.add_kernel)
"""
from __future__ import annotations

import html
import inspect
import os
import textwrap
from dataclasses import dataclass

from labkit.env import REPO_ROOT


@dataclass(frozen=True)
class Source:
    """``where`` (path relative to the course root, ":first line") and ``code`` (dedented text)."""

    where: str
    code: str

    def __str__(self) -> str:
        return f"# {self.where}\n{self.code}" if self.where else self.code

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer

            body = highlight(self.code, PythonLexer(), HtmlFormatter(noclasses=True, nowrap=True))
        except ImportError:  # pragma: no cover - pygments ships with IPython
            body = html.escape(self.code)
        head = f"<div style='font-size:90%;color:#555'>{html.escape(self.where)}</div>" if self.where else ""
        return (f"{head}<pre style='max-width:100%;overflow-x:auto;line-height:1.25;margin:0'>"
                f"{body}</pre>")


# The solution markers around a graded answer in labkit (labkit.grading.generate): not shown.
BEGIN_SOLUTION, END_SOLUTION, HINT = "# BEGIN SOLUTION", "# END SOLUTION", "# HINT:"


def is_marker(line: str) -> bool:
    """True for a solution-marker line (a note may follow the marker) or a hint line."""
    text = line.strip()
    return any(text == m or text.startswith(m + " ") for m in (BEGIN_SOLUTION, END_SOLUTION)) or \
        text.startswith(HINT)


def _unwrap(obj):
    """The Python object whose source is wanted: a Triton kernel's function, a wrapped function."""
    for attr in ("fn", "__wrapped__"):  # JITFunction / InterpretedFunction keep the function in .fn
        inner = getattr(obj, attr, None)
        if inner is not None and (inspect.isfunction(inner) or inspect.ismethod(inner)):
            return inner
    return obj


def source(obj) -> Source:
    """The `Source` of ``obj``; ValueError (one line) when Python cannot find it."""
    if isinstance(obj, str):
        return Source("", textwrap.dedent(obj).strip("\n"))
    target = _unwrap(obj)
    try:
        lines, first = inspect.getsourcelines(target)
        path = inspect.getsourcefile(target) or inspect.getfile(target)
    except (TypeError, OSError) as e:
        raise ValueError(f"show: no source for {type(obj).__name__} {getattr(obj, '__name__', obj)!r} ({e})") from None
    path = os.path.abspath(path)
    rel = os.path.relpath(path, REPO_ROOT) if path.startswith(str(REPO_ROOT) + os.sep) else os.path.basename(path)
    lines = [ln for ln in lines if not is_marker(ln)]
    return Source(f"{rel}:{max(first, 1)}", textwrap.dedent("".join(lines)).rstrip("\n"))


def show(*objs):
    """Display the source of each object (in Jupyter), or print it (elsewhere)."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover
        get_ipython = None
    for obj in objs:
        src = source(obj)
        if get_ipython is not None and get_ipython() is not None:
            display(src)
        else:
            print(src)
