"""The project as a whole: its modules import one another without a cycle (lazy imports inside functions
included), the maths imports no engine, and importing the reproduction package reads no notebook and no file under
scripts/ (a module's behaviour never depends on a notebook's text)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import reproduction

ROOT = Path(reproduction.__file__).parent.parent
PACKAGE = Path(reproduction.__file__).parent
ENGINES = {"ebp_train", "ebp_fast", "ebp_jax"}  # what runs the maths: ebp_lib may import none of them


def project_modules() -> dict[str, Path]:
    """{dotted name: source} of every module of the project: the top-level ebp_*.py and each package's modules."""
    modules = {path.stem: path for path in ROOT.glob("ebp_*.py")}
    for package in (PACKAGE, ROOT / "successors"):
        modules.update({f"{package.name}.{path.stem}": path for path in package.glob("*.py")
                        if path.stem != "__init__"})
    return modules


def module_imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """{module: the project modules it imports anywhere in its source} (`from reproduction import x` counts x)."""
    graph = {}
    for name, path in modules.items():
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        graph[name] = imported & set(modules) - {name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as a path [a, b, ..., a], or None."""
    done, visiting = set(), []

    def visit(module):
        if module in visiting:
            return visiting[visiting.index(module):] + [module]
        if module in done:
            return None
        visiting.append(module)
        for other in sorted(graph[module]):
            found = visit(other)
            if found:
                return found
        visiting.pop()
        done.add(module)
        return None
    for module in sorted(graph):
        found = visit(module)
        if found:
            return found
    return None


def test_the_modules_import_one_another_without_a_cycle():
    graph = module_imports(project_modules())
    assert graph["reproduction.parameters"] >= {"reproduction.records"} and graph["reproduction.records"] <= {"ebp_checkpoint"}
    assert cycle(graph) is None, "import cycle: " + " -> ".join(cycle(graph))


def test_the_cycle_check_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_the_maths_imports_no_engine():
    graph = module_imports(project_modules())
    assert graph["ebp_lib"] & ENGINES == set()
    assert "ebp_lib" in graph["ebp_train"]


def test_importing_the_package_reads_no_notebook_and_no_script():
    """Every file opened while every module of the package is imported, in a fresh interpreter: none is a notebook or lies under
    scripts/ (paper_tables.csv is read when the tables are first asked for, not at import)."""
    modules = sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__")
    probe = ("import json, sys\n"
             "opened = []\n"
             "sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == 'open' else None)\n"
             f"for module in {modules!r}:\n"
             "    __import__('reproduction.' + module)\n"
             "print(json.dumps(opened))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    opened = json.loads(done.stdout.splitlines()[-1])
    read = [p for p in opened if p.endswith((".ipynb", ".csv")) or "/scripts/" in p]
    assert read == [], read


def test_every_top_level_module_is_installed():
    """The editable install maps only the modules pyproject.toml lists: one left out imports from a notebook run in
    the checkout (its folder is on sys.path) but not from a kernel started elsewhere, nor from a fresh install."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["py-modules"])
    assert {path.stem for path in ROOT.glob("ebp_*.py")} <= listed


def test_the_package_front_page_names_every_module():
    """reproduction/__init__.py is the package's map: a module it does not name is one a reader cannot find."""
    import re

    named = set(re.findall(r"^([a-z_]+) ", reproduction.__doc__, re.MULTILINE))  # one line per module
    assert {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"} <= named


def imported_closure(graph: dict[str, set[str]], start: set[str], skip: set[str] = frozenset()) -> set[str]:
    """Every module `start` reaches through `graph` (lazy imports included), not walking through `skip`."""
    seen, todo = set(), list(start)
    while todo:
        module = todo.pop()
        if module not in seen and module not in skip:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


# The tuned baselines' harness and the successors it trains; EBP at their protocol (successors.ebp) trains with
# ebp_train's steps, which is what it is, so the walk stops there.
HARNESS = {"reproduction.tuned", "reproduction.backprop", "reproduction.successors", "successors.ste",
           "successors.bop", "successors.bayesbinn"}


def test_the_tuned_harness_imports_nothing_of_ebps_run_folder_nor_its_training():
    """The baselines' harness reaches neither EBP's run folder (reproduction.folder) nor ebp_train, in its source
    (lazy imports included) or at import in a fresh interpreter; and the successors' adapter nothing of the
    backprop baseline's."""
    graph = module_imports(project_modules())
    reached = imported_closure(graph, HARNESS, skip={"successors.ebp"})
    assert reached & {"reproduction.folder", "ebp_train"} == set(), sorted(reached)
    assert "reproduction.backprop" not in imported_closure(graph, {"reproduction.successors"}, skip={"successors.ebp"})
    probe = ("import sys\n"
             "import reproduction.tuned, reproduction.backprop, reproduction.successors\n"
             "print(sorted(m for m in sys.modules if m in ('reproduction.folder', 'ebp_train')))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.split() == ["[]"], done.stdout


def test_the_closure_walk_finds_what_a_module_reaches():
    graph = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"e"}}
    assert imported_closure(graph, {"a"}) == {"a", "b", "c"}
    assert imported_closure(graph, {"a"}, skip={"b"}) == {"a"}
