"""The package's shape: its modules import one another one way only, and each stays small."""

from __future__ import annotations

import ast
from pathlib import Path

import vllm_patcher

PACKAGE = Path(vllm_patcher.__file__).resolve().parent
MAX_LINES = 500
MAX_FUNCTION_LINES = 80  # a function's lines from its ``def`` to its last line, docstring included


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "patches" not in p.parts}


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import a module runs, at module level or inside a function (a function-level
    import is still a dependency); imports for type checkers only are left out."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if _type_checking(node):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a submodule's packages count too: importing
    ``a.b.c`` runs ``a/b/__init__.py``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            for target in targets:
                while target:
                    if target in modules and target != name and not name.startswith(target + "."):
                        deps.add(target)
                    target = target.rpartition(".")[0]
        graph[name] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules around it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_module_of_the_tool_imports_a_module_that_imports_it_back() -> None:
    graph = _graph()
    assert {"vllm_patcher.cli", "vllm_patcher.install.record", "vllm_patcher.doctor"} <= set(graph)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_record_reader_is_a_leaf_that_imports_none_of_the_tool() -> None:
    assert _graph()["vllm_patcher.install.record"] == set()


# --- which folder may import which -------------------------------------------------------------
# Every import counts, at module level or inside a function: a function-level import is a tie
# between folders all the same, only a later one. Imports for type checkers only are left out.

# What every folder may import: the small leaves at the top of the package, the package itself
# (its version), and the RECORD reader, a leaf that imports none of the tool (hashes in RECORD's
# spelling, which the pins' manifests use too). They import only one another.
BOTTOM = frozenset({"errors", "events", "fileops", "findings", "progress", "releases", "runtime"})
BOTTOM |= {"", "install.record"}

# The folders, bottom up: each imports only BOTTOM and the folders before it (and its own).
FOLDERS = (
    "intarget",  # runs in another interpreter: imports none of the tool (the Ray driver aside)
    "diffs",
    "catalogue",  # the patches as data: it runs no codemod and locates no install
    "transforms",  # the codemods, run on the files the catalogue names
    "install",  # an install, judged by the built-ins of the command's catalogue
    "models",
    "serving",
    "payoff",
    "load",
    "doctor",
    "rehearse",
    "sweep",
    "patching",
    "wheels",
    "authoring",
    "cluster",
    "cli",
    "__main__",
)

# Imports against that order, each with why (module -> the folder it imports).
UPWARD = {
    # the Ray driver runs the tool itself on each node, which ships it there with the tool
    ("vllm_patcher.intarget.scripts.ray_driver", "cluster"),
}

# Function-level imports of another folder, outside cli/ (a command imports its library when it
# runs: that is the start-up of every other command), each with why it waits: what its import
# would cost a path that never needs it.
LAZY = {
    # the pins' diff text is read by apply and the authoring commands: status never loads diffs/
    ("vllm_patcher.catalogue.model", "diffs"),
    # the node side of cluster: the driver machine imports this module and runs none of it
    ("vllm_patcher.cluster.nodes", "patching"),
    # subprocess, for --python and VIRTUAL_ENV only: status on --target or here never spawns
    ("vllm_patcher.install.locate", "runtime"),
    # the codemods and their cache load where a file goes through one: status and apply on a
    # pinned release never do
    ("vllm_patcher.patching.plan", "transforms"),
    ("vllm_patcher.patching.survey", "transforms"),
    # doctor's checks (and the catalogue they read), for a sweep with a drafter on a known release
    ("vllm_patcher.sweep.run", "doctor"),
    # as UPWARD says: only where the driver runs
    ("vllm_patcher.intarget.scripts.ray_driver", "cluster"),
}


def _unit(module: str) -> str:
    """The folder of a module, or the leaf it is (a BOTTOM one, ``__main__``)."""
    rest = module.split(".")[1:]
    return ".".join(rest) if ".".join(rest) in BOTTOM else (rest[0] if rest else "")


def _placed_imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import a module runs (none for type checkers only), and whether it is inside a
    function."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, in_function))
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            visit(child, inside)

    visit(tree, False)
    return found


def _ties() -> list[tuple[str, str, int, bool]]:
    """(module, the module of the package it imports, line, inside a function) for every import:
    the most specific module an import names (``from a import b`` is ``a.b`` when that is a
    module, else ``a``)."""
    modules = _modules()
    ties = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, in_function in _placed_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            else:
                module = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                named = [
                    f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module
                    for a in node.names
                ]
            for target in named:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    ties.append((name, target, node.lineno, in_function))
    return ties


def _rank(unit: str) -> int:
    return 0 if unit in BOTTOM else FOLDERS.index(unit) + 1


def test_every_folder_of_the_tool_has_its_place_in_the_order() -> None:
    units = {_unit(name) for name in _modules()}
    assert units - BOTTOM == set(FOLDERS)


def test_a_folder_imports_only_the_folders_below_it_wherever_the_import_is() -> None:
    wrong = sorted(
        f"{name}:{line} -> {target}"
        for name, target, line, _ in _ties()
        if (unit := _unit(name)) != (other := _unit(target))
        and _rank(other) >= _rank(unit)
        and not (unit in BOTTOM and other in BOTTOM)
        and (name, other) not in UPWARD
    )
    assert wrong == []
    used = {(name, _unit(target)) for name, target, _, _ in _ties()}
    assert UPWARD - used == set()  # no stale exception


def test_outside_cli_a_function_level_import_of_another_folder_says_why_it_waits() -> None:
    """A tie between folders is read at the top of the module, unless its import would cost a
    path that never needs it: LAZY says which and why."""
    lazy = {
        (name, _unit(target))
        for name, target, _, in_function in _ties()
        if in_function and _unit(target) != _unit(name) and not name.startswith("vllm_patcher.cli")
    }
    assert lazy - LAZY == set()  # move the import to the top, or say in LAZY why it waits
    assert LAZY - lazy == set()  # no stale entry


def test_only_a_command_loads_the_catalogue() -> None:
    """The run's options load the catalogue once and hand it down (``cli/base.Options``): below
    cli/ nothing loads it again but a cluster node's run, a command of its own on the node."""
    loaders = sorted(
        name
        for name, path in _modules().items()
        for node, _ in _placed_imports(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom)
        and any(alias.name == "load_catalogue" for alias in node.names)
    )
    assert loaders == ["vllm_patcher.cli.base", "vllm_patcher.cluster.nodes"]


def test_the_import_finder_sees_imports_inside_functions_and_not_for_type_checkers() -> None:
    source = (
        "import a\nif TYPE_CHECKING:\n    import b\ndef f():\n    from c import d\n"
        "class K:\n    def g(self):\n        import e\ntry:\n    import h\nexcept ImportError:\n"
        "    pass\n"
    )
    found = [(ast.unparse(node), inside) for node, inside in _placed_imports(ast.parse(source))]
    assert found == [
        ("import a", False),
        ("from c import d", True),
        ("import e", True),
        ("import h", False),
    ]


def test_no_module_of_the_tool_is_longer_than_500_lines() -> None:
    long = {
        name
        for name, path in _modules().items()
        if len(path.read_text(encoding="utf-8").splitlines()) > MAX_LINES
    }
    assert long == set(), "over 500 lines"


def _functions(tree: ast.AST, prefix: str) -> list[tuple[str, int]]:
    """Every function and method (nested ones too) as its dotted name and its length in lines."""
    found: list[tuple[str, int]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            found.append((f"{prefix}.{node.name}", lines))
            found.extend(_functions(node, f"{prefix}.{node.name}"))
        elif isinstance(node, ast.ClassDef):
            found.extend(_functions(node, f"{prefix}.{node.name}"))
        else:
            found.extend(_functions(node, prefix))
    return found


def test_no_function_of_the_tool_is_longer_than_80_lines() -> None:
    long = {
        name
        for module, path in _modules().items()
        for name, lines in _functions(ast.parse(path.read_text(encoding="utf-8")), module)
        if lines > MAX_FUNCTION_LINES
    }
    assert long == set(), "over 80 lines"


def test_the_function_measure_counts_from_def_to_the_last_line() -> None:
    source = "class A:\n    def f(self):\n        x = 1\n\n        return x\n"
    assert _functions(ast.parse(source), "m") == [("m.A.f", 4)]


def test_no_module_imports_a_name_another_module_keeps_private() -> None:
    """A name with a leading underscore is its module's own; one another module needs is public
    (and says so by its name)."""
    crossing = sorted(
        f"{name}: {alias.name}"
        for name, path in _modules().items()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom)
        and (node.level or (node.module or "").startswith("vllm_patcher"))
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    )
    assert crossing == []


def test_every_package_of_the_tool_is_installed_by_pyproject() -> None:
    """A folder missing from pyproject's list imports from a checkout and fails in a pip install
    (as ``serving`` did: ``payoff sweep`` raised ImportError in an installed tool)."""
    import tomllib

    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(pyproject["tool"]["setuptools"]["packages"]) - {"vllm_patcher.patches"}
    folders = {_module_name(p) for p in PACKAGE.rglob("__init__.py") if "patches" not in p.parts}
    assert listed == folders


# --- one command-line front end, and no module-level mutable state in it ----------------------

ARGUMENT_PARSERS = ("argparse", "optparse", "getopt")


def _reads_argv(tree: ast.AST) -> bool:
    return any(
        isinstance(node, ast.Attribute)
        and node.attr == "argv"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
        for node in ast.walk(tree)
    )


def _runs_as_script(tree: ast.Module) -> bool:
    """A script the tool runs in another interpreter (the target's, a Ray driver's): its
    arguments are the tool's own request to it, never the user's command line."""
    return any(
        isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body
    )


def test_the_command_line_has_one_front_end_click() -> None:
    """The user's command line is parsed by click alone (``cli/root.py`` and its groups): no
    second parser beside it (as ``cli/fast.py`` was), no module reading ``sys.argv`` except the
    scripts run in another interpreter, no argparse, optparse or getopt."""
    assert not (PACKAGE / "cli" / "fast.py").exists()
    readers, parsers, clicks = [], [], []
    for name, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if _reads_argv(tree) and not _runs_as_script(tree):
            readers.append(name)
        imported = {
            (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
            for node in _imports(tree)
            if isinstance(node, ast.Import) or not node.level
            for alias in node.names
        }
        if imported & set(ARGUMENT_PARSERS):
            parsers.append(name)
        if "click" in imported and not name.startswith("vllm_patcher.cli"):
            clicks.append(name)
    assert readers == [] and parsers == [] and clicks == []


def test_the_front_end_guard_finds_a_second_parser() -> None:
    assert _reads_argv(ast.parse("import sys\nargs = sys.argv[1:]\n"))
    assert not _runs_as_script(ast.parse("import sys\nargs = sys.argv[1:]\n"))
    assert _runs_as_script(ast.parse("import sys\nif __name__ == '__main__':\n    sys.argv\n"))


def _package_classes() -> set[str]:
    """The names of the classes the package defines."""
    return {
        node.name
        for path in _modules().values()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    }


def _mutable_state(tree: ast.Module, classes: set[str]) -> list[str]:
    """Module-level (and class-level) assignments of a list, dict or set (a display, a
    comprehension or a call of the builtin) or of an instance of a class of the package, and
    ``global`` statements anywhere:
    state a run would share with the next one in the same process."""
    found: list[str] = []
    # a class attribute is module-level state too (``class RUN: argv = []``)
    body = [*tree.body, *(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body)]
    for node in body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            value = node.value
            mutable = isinstance(
                value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
            )
            if isinstance(value, ast.Call):
                called = value.func
                name = (
                    called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
                )
                mutable = name in ("list", "dict", "set", "defaultdict", "deque") or name in classes
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            dunder = all(isinstance(t, ast.Name) and t.id.startswith("__") for t in targets)
            if mutable and not dunder:  # __all__ is the module's export list, read by tools
                found.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
    found += [
        f"line {node.lineno}: global {', '.join(node.names)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Global)
    ]
    return found


def test_no_module_of_the_command_line_keeps_module_level_mutable_state() -> None:
    """A run's state lives in its application object (``cli/base.Application``, in click's
    context), never in a module: a list, dict or set at module level, an instance of one of the
    package's classes (``RUN``-style), or a ``global`` statement."""
    classes = _package_classes()
    found = {
        name: state
        for name, path in _modules().items()
        if name.startswith("vllm_patcher.cli")
        and (state := _mutable_state(ast.parse(path.read_text(encoding="utf-8")), classes))
    }
    assert found == {}


def test_the_mutable_state_guard_finds_each_kind() -> None:
    source = (
        "A = []\nB: dict[str, int] = {}\nC = {1}\nD = Run()\nE = dict(x=1)\nF = (1, 2)\n"
        "G = frozenset()\n__all__ = ['f']\ndef f():\n    global H\nclass R:\n    argv: list[str] = []\n"
    )
    found = _mutable_state(ast.parse(source), {"Run"})
    assert [line.split(":")[0] for line in found] == [f"line {n}" for n in (1, 2, 3, 4, 5, 12, 10)]


LEAVES = {"errors", "events", "fileops", "findings", "progress", "releases", "runtime"}
MAX_LEAF_LINES = 250


def test_a_capability_is_a_folder_and_only_small_leaves_lie_at_the_top() -> None:
    """A newcomer finds a capability from the folder names: the top of the package holds the
    entry points and a few small leaves every folder uses, nothing else."""
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert top == LEAVES
    big = {
        name: n
        for name in LEAVES
        if (n := len((PACKAGE / f"{name}.py").read_text(encoding="utf-8").splitlines()))
        > MAX_LEAF_LINES
    }
    assert big == {}
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert {"patching", "authoring", "diffs", "wheels", "cluster", "catalogue", "cli"} <= folders
    # payoff reads and judges counters, load drives vLLM's benchmark client, sweep runs k by k,
    # serving starts every vLLM process: one capability each
    assert {"payoff", "load", "sweep", "serving"} <= folders


def test_every_folder_says_what_it_holds_in_its_docstring() -> None:
    """Each folder's ``__init__`` docstring names its modules, so the folder reads top-down."""
    unnamed = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        if "patches" in init.parts or init.parent == PACKAGE:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        for module in sorted(init.parent.glob("*.py")):
            if module.stem != "__init__" and module.stem not in doc:
                unnamed.append(f"{_module_name(init)}: {module.stem}")
    assert unnamed == []


def test_the_check_library_runs_only_in_the_target_and_in_target_code_imports_no_tool_module() -> (
    None
):
    """``intarget/`` holds what runs in another interpreter: nothing of the tool imports the
    check library (the probe exposes it there by path), and neither the check library nor the
    scripts import the rest of the tool (the target's interpreter may not have it), but the Ray
    driver, which runs the tool itself on each node (shipped to them with it)."""
    graph = _graph()
    graph.pop("vllm_patcher.intarget.scripts.ray_driver")
    inside = "vllm_patcher.intarget"
    library = f"{inside}.checklib"
    users = sorted(
        name
        for name, deps in graph.items()
        if not name.startswith(inside) and any(d.startswith(library) for d in deps)
    )
    assert users == []
    reaching_out = sorted(
        f"{name} -> {dep}"
        for name, deps in graph.items()
        if name.startswith(inside + ".")
        for dep in deps
        if not dep.startswith(inside) and dep != "vllm_patcher"
    )
    assert reaching_out == []
