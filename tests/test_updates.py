"""The update catalogue: an update's name, weight type, label and help live in its ebp_lib.UPDATES entry alone.

The command line's --update help, the parameter check's message, the tables' variants and sections and the
mechanism list are generated from it, and no module, script or notebook outside the maths (ebp_lib), the kernels
(ebp_fast, ebp_jax) and the docs types them again: a new update is its entry, its kernel and its documentation."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers import load_script

import ebp_lib
from reproduction import agreement, mechanisms, parameters

ROOT = Path(__file__).resolve().parents[1]
# The files outside the maths and kernels that may name updates: one pairs each of the authors' MATLAB commits
# with the update that transcribes it (a check of the maths against their code, run in GNU Octave); and a report
# whose prose names the update it measured
EXEMPT = {"scripts/authors_code_octave.py", "scripts/ebp_d_gap.py"}
FAKE = ebp_lib.Update("binary", False, False, True, "h read through a fog", "the authors' imagined code of 1999")


@pytest.fixture
def fake_update(monkeypatch):
    """A new entry of ebp_lib.UPDATES, "authors-1999" (binary weights), and nothing else changed."""
    monkeypatch.setitem(ebp_lib.UPDATES, "authors-1999", FAKE)
    return "authors-1999"


def test_the_command_line_and_the_parameter_check_read_a_new_update_from_its_entry(fake_update, capsys):
    """With one entry added to ebp_lib.UPDATES and no other file touched, --update accepts it and its --help names
    it with its weights and help line; RunConfig trains it on binary weights, refuses it on real ones, and an
    unknown update's message lists it with its help."""
    run_tables = load_script("run_tables")
    assert run_tables.parse_args(["--all", "--update", fake_update]).update == fake_update
    assert run_tables.parse_args(["--all", "--real-update", fake_update]).update == fake_update  # its earlier name
    with pytest.raises(SystemExit):
        run_tables.parse_args(["--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the help text
    assert f"{fake_update} (binary weights): {FAKE.help}" in shown
    config = parameters.RunConfig(update=fake_update)
    assert config.network().real_update_parts == FAKE and config.checkpoint_config()["real_update"] == fake_update
    with pytest.raises(parameters.ParameterError, match="authors' code for binary weights"):
        parameters.RunConfig(update=fake_update, weights="real")
    with pytest.raises(parameters.ParameterError) as info:
        parameters.RunConfig(update="authors-1066")
    assert f"{fake_update} (binary weights): {FAKE.help}" in str(info.value)


def test_the_tables_variants_and_the_mechanism_list_follow_the_entries():
    """Every update but the spec's is a variant beside the main one; the authors' code as the paper ran it is one
    under Table 4's held reading too; each code of the catalogue is one section of the tables, holding its
    updates; every binary-only update is a tested mechanism of the binary offset, named by its label."""
    others = [name for name in ebp_lib.UPDATES if name != ebp_lib.DEFAULT_UPDATE]
    as_ran = [name for name, u in ebp_lib.UPDATES.items() if u.as_paper_ran]
    assert list(agreement.UPDATE_VARIANTS) == others + [f"{name} held" for name in as_ran]
    assert agreement.AUTHORS_CODE == {"real": "authors", "binary": "authors-2015"}
    assert agreement.AUTHORS_CODE_NAMES == {"real": "the authors' real-weight code",
                                            "binary": "the authors' binary code of 2015"}
    assert agreement.update_sections() == [
        ("The authors' real-weight code", "real", ["authors", "authors-delta", "authors-variance", "authors held"]),
        ("The authors' binary code of 2015", "binary", ["authors-2015", "authors-2015 held"])]
    tested = {m.name: m for m in mechanisms.tested_mechanisms()}
    assert tested["authors-2015"].change_text == ebp_lib.UPDATES["authors-2015"].label == "⟨W⟩ one minibatch stale"
    assert tested["authors-2015"].change == {"update": "authors-2015"} and "authors" not in tested


def restated(text: str) -> list[str]:
    """The words of ebp_lib.UPDATES that the source `text` holds in a string that is not a docstring: a name other
    than the spec's (whole, or inside a longer string if it has a hyphen, such as "authors-2015"), a label or a
    help line of one."""
    words = [u.label for name, u in ebp_lib.UPDATES.items() if name != ebp_lib.DEFAULT_UPDATE]
    words += [u.help for name, u in ebp_lib.UPDATES.items() if name != ebp_lib.DEFAULT_UPDATE]
    names = [name for name in ebp_lib.UPDATES if name != ebp_lib.DEFAULT_UPDATE]
    tree = ast.parse(text)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            s = node.value
            found += [f"{s!r} (line {node.lineno})" for name in names if s == name or ("-" in name and name in s)]
            found += [f"{s!r} (line {node.lineno})" for word in words if word in s]
    return found


def code_cells(notebook: Path) -> str:
    """A notebook's code cells, as one Python source (IPython's magics left out)."""
    cells = json.loads(notebook.read_text())["cells"]
    return "\n".join("".join(line for line in c["source"] if not line.lstrip().startswith(("%", "!")))
                     for c in cells if c["cell_type"] == "code")


def sources() -> dict[str, str]:
    """{path: Python source} of the package, the scripts and the notebooks' code: everything but the maths and
    kernels (the ebp_*.py modules), the tests and the docs."""
    found = {str(p.relative_to(ROOT)): p.read_text() for folder in ("reproduction", "scripts")
             for p in sorted((ROOT / folder).glob("*.py"))}
    found.update({str(p.relative_to(ROOT)): code_cells(p) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))})
    return {path: text for path, text in found.items() if path not in EXEMPT}


def test_no_module_script_or_notebook_types_an_update_again():
    """Outside ebp_lib's entries (and the kernels and docs), no string names an update, or holds its label or
    help: each is read from ebp_lib.UPDATES, so a new update needs no line there."""
    found = {path: hits for path, text in sources().items() if (hits := restated(text))}
    assert found == {}


def test_the_check_finds_a_restated_copy():
    """The check above finds what it looks for: a name, a hyphenated name inside a longer string, a label, a help
    line; and not a docstring, nor the spec's name."""
    assert restated('x = "authors-delta"') == ["'authors-delta' (line 1)"]
    assert restated('x = f"{run}-authors-2015"') != []
    assert restated(f'x = "{ebp_lib.UPDATES["authors-2015"].label}"') != []
    assert restated(f'x = "help: {ebp_lib.UPDATES["authors"].help}"') != []
    assert restated('"""authors-delta: a docstring"""\nx = "spec"\ny = "the authors\' code"') == []


def test_an_update_of_the_other_weight_type_is_refused_saying_what_to_select(tmp_path):
    """make_jobs refuses binary-weight rows under a real-weight update before building a job, naming the weights
    to select (the catalogue's own weight type, read from the entry)."""
    from reproduction.paper_tables import Selection, make_jobs, read_paper_tables

    rows = [r for r in read_paper_tables() if r["weights"] == "binary" and r["table"] == 2][:2]
    with pytest.raises(ValueError, match="'authors' applies to real weights only.*binary-weight runs: select "
                                         "--weights real"):
        make_jobs(rows, Selection("quick", "sampled", update="authors", runs_dir=tmp_path))
    jobs = make_jobs(rows, Selection("quick", "sampled", update="authors-2015", runs_dir=tmp_path))
    assert jobs and {job.config.update for job in jobs} == {"authors-2015"}
    assert all(job.key.endswith("-authors-2015") for job in jobs)
