"""The reproduction package as a whole: its rooms import one another without a cycle, and importing them reads
no notebook and no file under scripts/ (a module's behaviour never depends on a notebook's text)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import reproduction

PACKAGE = Path(reproduction.__file__).parent


def room_imports() -> dict[str, set[str]]:
    """{room: the rooms it imports} from the source of every module of the package."""
    graph = {}
    for path in PACKAGE.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "reproduction":
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("reproduction."):
                imported.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                imported.update(a.name.split(".")[1] for a in node.names if a.name.startswith("reproduction."))
        graph[path.stem] = imported
    return graph


def test_the_rooms_import_one_another_without_a_cycle():
    graph = room_imports()
    assert graph["parameters"] == {"records"} and graph["records"] == set()  # the foundations
    done, visiting = set(), []

    def visit(room):
        assert room not in visiting, f"import cycle: {' -> '.join(visiting + [room])}"
        if room in done:
            return
        visiting.append(room)
        for other in graph[room]:
            visit(other)
        visiting.pop()
        done.add(room)
    for room in graph:
        visit(room)


def test_importing_the_rooms_reads_no_notebook_and_no_script():
    """Every file opened while every room is imported, in a fresh interpreter: none is a notebook or lies under
    scripts/ (paper_tables.csv is read when the tables are first asked for, not at import)."""
    rooms = sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__")
    probe = ("import json, sys\n"
             "opened = []\n"
             "sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == 'open' else None)\n"
             f"for room in {rooms!r}:\n"
             "    __import__('reproduction.' + room)\n"
             "print(json.dumps(opened))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    opened = json.loads(done.stdout.splitlines()[-1])
    read = [p for p in opened if p.endswith((".ipynb", ".csv")) or "/scripts/" in p]
    assert read == [], read
