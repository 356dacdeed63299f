"""Static checks of a submission's source (AST only; the code is never run here).

Each lab's graded tests declare a `Policy`; `check(source, policy, exercises)`
returns ``{exercise: one-line reason}`` for the exercises that score 0 before
anything runs. A violation inside the body of a graded function costs that
exercise; anywhere else (module level, a helper any exercise may call) it
costs every exercise of the file.

What is refused, and why:
- importing ``solutions`` (the reference answers);
- importing from labkit anything but the names the lab's policy allows (the
  graded functions have reference implementations inside labkit);
- dynamic code and introspection that would get round the two rules above:
  exec/eval/compile/__import__, importlib, runpy, ctypes, gc, inspect,
  marshal, pickle, subprocess, multiprocessing, socket, os.system/exec*/spawn*/
  fork/popen, frame and ``__dict__``/``__globals__``-style attributes, and
  getattr/setattr/delattr with a computed attribute name;
- with ``forbid_collectives``: any use of torch.distributed's built-in
  collectives or of the process group objects behind them;
- with ``jit_kernels``: a graded kernel that is not a top-level
  ``@triton.jit`` function, or a name rebound after its definition.

These rules are best-effort (Python is dynamic); the sandbox, the worker's
poisoned references and the judge's own data checks back them up.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

ALL = "*"   # key for a violation that costs every exercise of the file


@dataclass(frozen=True)
class Policy:
    """What a lab's graded file may use.

    labkit_allowed: dotted names the file may import from labkit (e.g.
        "labkit.matmul.Traffic"); "labkit" alone allows ``import labkit`` for its
        side effects (no attribute of it may be used).
    references: dotted paths of labkit's own implementations of graded
        functions; the worker replaces them with a function that raises.
    forbid_collectives: torch.distributed's built-in collectives are off limits.
    jit_kernels: graded names that must be top-level ``@triton.jit`` functions.
    forbid_modules: dotted modules (e.g. "torch.utils.checkpoint") whose ready-made version of
        the exercise the lab asks the learner to write; importing or using them scores 0.
    """

    labkit_allowed: frozenset = frozenset()
    references: tuple = ()
    forbid_collectives: bool = False
    jit_kernels: tuple = ()
    forbid_modules: tuple = ()


BANNED_MODULES = {"importlib", "runpy", "ctypes", "gc", "inspect", "marshal", "pickle", "dill", "cloudpickle",
                  "subprocess", "multiprocessing", "socket", "imp", "code", "codeop", "builtins", "pty",
                  "solutions"}
BANNED_NAMES = {"exec", "eval", "compile", "__import__", "globals", "locals", "breakpoint", "__builtins__"}
BANNED_ATTRS = {"__dict__", "__globals__", "__builtins__", "__code__", "__subclasses__", "__bases__", "__mro__",
                "__closure__", "__loader__", "__spec__", "f_globals", "f_locals", "f_back", "f_builtins",
                "_getframe", "gi_frame", "tb_frame", "cr_frame", "system", "popen", "fork", "forkpty",
                "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe", "spawnv", "spawnve",
                "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "posix_spawn", "posix_spawnp",
                "attrgetter", "methodcaller"}
DYNAMIC_ATTR_FUNCS = {"getattr", "setattr", "delattr", "hasattr"}
# torch.distributed's collectives and the objects behind them (unambiguous names: banned on any object)
COLLECTIVES = {"all_reduce", "allreduce", "all_reduce_coalesced", "allreduce_coalesced", "all_gather",
               "allgather", "all_gather_into_tensor", "all_gather_object", "_all_gather_base", "all_gather_single",
               "all_gather_coalesced", "reduce_scatter_single",
               "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter_multigpu",
               "all_to_all", "all_to_all_single", "alltoall", "alltoall_base", "broadcast_object_list",
               "scatter_object_list", "gather_object", "_broadcast_coalesced", "distributed_c10d",
               "_functional_collectives", "ProcessGroup", "ProcessGroupGloo", "ProcessGroupNCCL",
               "_coalescing_manager", "_C", "batch_isend_irecv_coalesced", "_distributed_c10d"}
DIST_ONLY = {"reduce", "gather", "scatter", "broadcast", "barrier", "monitored_barrier"}  # banned on torch.distributed


def check(source: str, policy: Policy, exercises: set[str]) -> dict[str, str]:
    """``{exercise or ALL: reason}`` for the first violation found per exercise (empty dict: clean)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return {ALL: f"syntax error at line {e.lineno}: {e.msg}"}
    visitor = _Checker(policy)
    for node in tree.body:
        owner = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in exercises \
            else ALL
        visitor.owner = owner
        visitor.visit(node)
    found = dict(visitor.found)
    for name in policy.jit_kernels:
        if name in exercises and name not in found:
            reason = _jit_problem(tree, name)
            if reason:
                found[name] = reason
    return found


def reasons_for(found: dict[str, str], exercise: str) -> str | None:
    """The reason ``exercise`` scores 0, if any."""
    return found.get(exercise) or found.get(ALL)


class _Checker(ast.NodeVisitor):
    def __init__(self, policy: Policy):
        self.policy = policy
        self.found: dict[str, str] = {}
        self.owner = ALL
        self.labkit_aliases: dict[str, str] = {}   # local name -> dotted labkit module path
        self.dist_aliases: set[str] = set()        # local names bound to torch.distributed
        self.torch_aliases: set[str] = set()       # local names bound to torch
        self.torch_modules: dict[str, str] = {}    # local name -> dotted torch path ("from torch import utils")

    def flag(self, node, reason: str) -> None:
        self.found.setdefault(self.owner, f"{reason} (line {getattr(node, 'lineno', '?')})")

    # ---- imports
    def visit_Import(self, node):
        for alias in node.names:
            self._module(node, alias.name)
            local = alias.asname or alias.name.split(".")[0]
            if alias.name == "torch.distributed" and alias.asname:
                self.dist_aliases.add(local)
            elif alias.name.split(".")[0] == "torch":
                self.torch_aliases.add(local)
                if alias.asname:
                    self.torch_modules[local] = alias.name
            if alias.name.split(".")[0] == "labkit":
                path = alias.name if alias.asname else "labkit"
                if alias.name not in self.policy.labkit_allowed:
                    self.flag(node, f"forbidden import `{alias.name}`: this lab allows from labkit only "
                                    f"{_allowed(self.policy)}")
                self.labkit_aliases[local] = path

    def visit_ImportFrom(self, node):
        mod = ("." * node.level) + (node.module or "")
        if node.level:
            self.flag(node, "relative imports are not allowed in a graded file")
            return
        self._module(node, mod)
        for alias in node.names:
            full = f"{mod}.{alias.name}"
            self._module(node, full)
            if mod.split(".")[0] == "labkit" and full not in self.policy.labkit_allowed:
                self.flag(node, f"forbidden import `{full}`: this lab allows from labkit only {_allowed(self.policy)}")
            if mod == "torch" and alias.name == "distributed":
                self.dist_aliases.add(alias.asname or alias.name)
            if mod.split(".")[0] == "torch":
                self.torch_modules[alias.asname or alias.name] = full
            if self.policy.forbid_collectives and mod.startswith("torch.distributed") and \
                    (alias.name in COLLECTIVES or alias.name in DIST_ONLY or alias.name == "*"):
                self.flag(node, f"torch.distributed's `{alias.name}` is not allowed in this lab; use exchange / "
                                "isend / irecv")
            if alias.name == "*" and mod.split(".")[0] == "labkit":
                self.flag(node, f"`from {mod} import *` is not allowed in a graded file")

    def _module(self, node, name: str) -> None:
        parts = name.split(".")
        if parts[0] in BANNED_MODULES:
            self.flag(node, f"forbidden import `{name}`")
        elif parts[:2] == ["os", "system"] or (parts[0] == "os" and len(parts) > 1 and parts[1] in BANNED_ATTRS):
            self.flag(node, f"forbidden import `{name}`")
        elif self._forbidden_module(name):
            self.flag(node, f"`{name}` is not allowed in this lab: write it yourself")
        elif self.policy.forbid_collectives and parts[0] == "torch" and \
                any(p in COLLECTIVES for p in parts[1:]):
            self.flag(node, f"forbidden import `{name}`: built-in collectives are not allowed in this lab")

    def _forbidden_module(self, name: str) -> bool:
        return any(name == m or name.startswith(m + ".") for m in self.policy.forbid_modules)

    # ---- names and attributes
    def visit_Name(self, node):
        if node.id in BANNED_NAMES:
            self.flag(node, f"`{node.id}` is not allowed in a graded file")
        self.generic_visit(node)

    def visit_Attribute(self, node):
        self._attr(node, node.attr, node.value)
        self.generic_visit(node)

    def visit_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_ATTR_FUNCS and len(node.args) >= 2:
            name = node.args[1]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.flag(node, f"{node.func.id}() with a computed attribute name is not allowed in a graded file")
            else:
                self._attr(node, name.value, node.args[0])
        self.generic_visit(node)

    def _attr(self, node, attr: str, base) -> None:
        if attr in BANNED_ATTRS or (attr == "modules" and _name(base) == "sys"):
            self.flag(node, f"attribute `{attr}` is not allowed in a graded file")
        dotted = _dotted(base)
        if dotted is not None and (dotted.split(".")[0] in self.torch_modules or
                                   dotted.split(".")[0] in self.torch_aliases):
            head, *rest = dotted.split(".")
            full = ".".join([self.torch_modules.get(head, "torch"), *rest, attr])
            if self._forbidden_module(full):
                self.flag(node, f"`{full}` is not allowed in this lab: write it yourself")
        if dotted is not None:
            head, *rest = dotted.split(".")
            if head in self.labkit_aliases:
                full = ".".join([self.labkit_aliases[head], *rest, attr])
                if full not in self.policy.labkit_allowed:
                    self.flag(node, f"`{full}` is not allowed: this lab allows from labkit only "
                                    f"{_allowed(self.policy)}")
        if self.policy.forbid_collectives:
            on_dist = dotted is not None and (dotted in self.dist_aliases or
                                              (dotted.split(".")[0] in self.torch_aliases and
                                               dotted.split(".")[1:2] == ["distributed"]))
            if attr in COLLECTIVES or (on_dist and attr in DIST_ONLY):
                self.flag(node, f"`{attr}` (a built-in collective) is not allowed in this lab; "
                                "use exchange / isend / irecv")


def _name(node) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _allowed(policy: Policy) -> str:
    names = sorted(n for n in policy.labkit_allowed if n != "labkit")
    return ", ".join(f"`{n}`" for n in names) if names else "nothing"


def _jit_problem(tree: ast.Module, name: str) -> str | None:
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(defs) != 1:
        return f"{name} must be defined once, at the top level, as a @triton.jit function"
    if not any(_is_jit(d) for d in defs[0].decorator_list):
        return f"{name} must be a @triton.jit kernel (line {defs[0].lineno})"
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, (ast.Global, ast.Delete)):
            names = node.names if isinstance(node, ast.Global) else [_name(t) for t in node.targets]
            if name in names:
                return f"{name} is rebound after its definition (line {node.lineno})"
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name and node is not defs[0]:
            return f"{name} is defined twice (line {node.lineno})"
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return f"{name} is rebound after its definition (line {node.lineno})"
    return None


def _is_jit(dec) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return _dotted(target) in ("triton.jit", "jit")
