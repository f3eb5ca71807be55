"""Records of where and with what something ran (reproduction.records): the one machine record every script
writes, and files written whole or not at all."""
from __future__ import annotations

import pytest
from helpers import load_script

from reproduction import records
from reproduction.folder import ebp_expected


def test_the_scripts_record_the_machine_with_records_timing_record():
    """The benchmark and the binary-inference timings record the machine with records.timing_record (machine_record
    with the CPU's flags and the load average they started under), so their records name the same fields. An idle
    load is injected: the tests never depend on the machine's real load."""
    record = records.machine_record()
    assert record.keys() >= {"cpu_model", "cores", "numpy", "numba", "git_commit", "git_dirty", "blas", "date"}
    timing = {"cpu_flags", "load_average_at_start", "load_limit_per_core", "loaded"}
    benchmark = load_script("benchmark").machine(load=(0.0, 0.0, 0.0))
    assert benchmark.keys() == record.keys() | timing and benchmark["loaded"] is False
    assert benchmark["cpu_model"] == records.cpu_model() and benchmark["numpy"] == records.package_versions()["numpy"]
    binary = load_script("binary_inference").machine(load=(0.0, 0.0, 0.0))
    assert binary.keys() == record.keys() | timing


def test_a_timing_on_a_loaded_machine_is_refused_unless_allowed_and_then_marked(capsys):
    """Above LOAD_PER_CORE_LIMIT per core (1-minute load average) timing_record refuses to start; --allow-loaded
    lets it go on with "loaded": true and a loud warning. At the end the benchmark's own busy processes are allowed
    for; a load that rose beyond them marks (or refuses) the record as well."""
    cores = records.machine_record()["cores"]
    limit = records.LOAD_PER_CORE_LIMIT * cores
    with pytest.raises(records.LoadedMachineError, match=r"refusing to measure: the 1-minute load average at the "
                                                         r"start was .*--allow-loaded"):
        records.timing_record(load=(limit + 0.5, 1.0, 1.0))
    loaded = records.timing_record(allow_loaded=True, load=(limit + 0.5, 1.0, 1.0))
    assert loaded["loaded"] is True and loaded["load_average_at_start"] == [limit + 0.5, 1.0, 1.0]
    assert "WARNING: LOADED MACHINE" in capsys.readouterr().err
    assert records.finish_timing_record(loaded, allow_loaded=True, load=(0.1, 0.1, 0.1)) is True  # stays loaded

    idle = records.timing_record(load=(limit - 0.5, 0.0, 0.0))
    assert idle["loaded"] is False and capsys.readouterr().err == ""
    # the benchmark's own process counts in the end reading: limit + 1 is still idle, beyond it is not
    assert records.finish_timing_record(idle, load=(limit + 0.9, 0.5, 0.5), own_processes=1) is False
    with pytest.raises(records.LoadedMachineError, match="refusing to write the record: the 1-minute load average "
                                                         "at the end"):
        records.finish_timing_record(idle, load=(limit + 1.5, 0.5, 0.5), own_processes=1)
    assert records.finish_timing_record(idle, allow_loaded=True, load=(limit + 1.5, 0.5, 0.5)) is True
    assert idle["load_average_at_end"] == [limit + 1.5, 0.5, 0.5]


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2 popcnt avx2 fma avx512f\n")
    assert records.cpu_flags(cpuinfo=cpuinfo) == {"popcnt": True, "avx2": True, "fma": True, "avx512f": True,
                                                  "avx512bw": False, "avx512_vpopcntdq": False}
    assert records.cpu_flags(cpuinfo=tmp_path / "absent") is None


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    """write_json replaces a file whole; when the rename fails the old file stays as it was, the temporary is
    removed, and the error names the file."""
    path = tmp_path / "result.json"
    records.write_json(path, {"epochs_done": 1})
    assert path.read_text() == '{\n "epochs_done": 1\n}\n'

    def refuse(source, target):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(records.os, "replace", refuse)
    with pytest.raises(OSError, match=f"could not write {path}") as info:
        records.write_json(path, {"epochs_done": 2})
    assert info.value.errno == 28
    assert path.read_text() == '{\n "epochs_done": 1\n}\n' and [p.name for p in tmp_path.iterdir()] == ["result.json"]


# ----------------------------------------------------------------------------------------------------------
# Run records: one writer, one reader, a versioned format and its upgrader
# ----------------------------------------------------------------------------------------------------------

def _record(tmp_path, **changes):
    """A consistent EBP run record of 2 epochs (as EpochRecorder writes it), with `changes`."""
    from helpers import fake_result

    record = fake_result({"architecture": "block13", "weights": "binary"}, 2, 300, "tiny", 0.2)
    del record["profile"]
    return {**record, **changes}


def _older(current: dict, old_format: int) -> dict:
    """The record `current` as a format `old_format` writer wrote it: format 3 named the update real_update;
    format 2 had none (the spec's, the only one); format 1 no mask_reading either (absent) and no method."""
    dropped = {1: ("mask_reading", "update"), 2: ("update",), 3: ()}[old_format]
    old = {k: v for k, v in current.items() if old_format > 1 or k != "method"}
    old["format"] = old_format
    old["parameters"] = {"real_update" if k == "update" else k: v for k, v in current["parameters"].items()
                         if k not in dropped}
    return old


@pytest.mark.parametrize("old_format", [1, 2, 3])
def test_an_older_format_record_is_read_as_the_current_one_and_upgraded_once(tmp_path, old_format):
    """Format 1 (no method, no mask_reading, no update), format 2 (no update) and format 3 (the update named
    real_update) read as the current format through the one upgrader: method 'ebp', the default reading placed
    after `weights` and the spec's update after it, under its name of today, nothing else changed; upgrade_files
    rewrites only such files, and the rewritten text differs from the old in exactly those lines."""
    import json

    current = _record(tmp_path)
    old = _older(current, old_format)
    path, done = tmp_path / "old" / "result.json", tmp_path / "current" / "result.json"
    path.parent.mkdir(), done.parent.mkdir()
    records.write_json(path, old)
    records.write_record(done, current)
    assert records.read_record(path) == current
    names = list(records.read_record(path)["parameters"])
    assert names[names.index("mask_reading") + 1] == "update" and "real_update" not in names
    assert names[names.index("weights") + 1] == "mask_reading"
    before, untouched = path.read_text().splitlines(), done.read_bytes()
    assert records.upgrade_files([path, done], echo=lambda *_: None) == [path]
    assert done.read_bytes() == untouched and json.loads(path.read_text()) == current
    after = path.read_text().splitlines()
    added = [line for line in after if line not in before]
    expected = [f' "format": {records.RECORD_FORMAT},', '  "update": "spec",']
    expected += [' "method": "ebp",', '  "mask_reading": "absent",'] if old_format == 1 else []
    assert sorted(added) == sorted(expected)
    removed = [f' "format": {old_format},'] + (['  "real_update": "spec",'] if old_format == 3 else [])
    assert [line for line in before if line not in after] == removed


def test_upgrade_names_a_missing_file_and_rewrites_nothing(tmp_path):
    current = _record(tmp_path)
    old = _older(current, 2)
    path = tmp_path / "result.json"
    records.write_json(path, old)
    before = path.read_bytes()
    with pytest.raises(records.RecordError, match="missing.json: no such result file"):
        records.upgrade_files([path, tmp_path / "missing.json"], echo=lambda *_: None)
    assert path.read_bytes() == before


@pytest.mark.parametrize("method, old_format", [("backprop", 2), ("backprop", 3), ("successor", 3)])
def test_a_baseline_record_of_an_older_format_reads_as_the_current_one_unchanged_otherwise(method, old_format):
    """The baselines' parameters hold no update: only their format number changes (a `real_update` among them
    would be a name of theirs, and stays)."""
    old = {"format": old_format, "method": method, "parameters": {"hidden": [800], "real_update": 1}}
    assert records.upgrade_record(old) == {**old, "format": records.RECORD_FORMAT}


@pytest.mark.parametrize("text, message", [
    ("{not json", "not JSON"),
    ("[1, 2]", "not a run record"),
    ('{"format": 5, "method": "ebp"}', "written by a newer version of the project"),
    ('{"format": 0, "method": "ebp"}', "format 0 is not a run record format"),
    ('{"format": 4, "method": "sgd"}', "method 'sgd' is not one of ebp, backprop"),
])
def test_the_reader_refuses_what_is_not_a_record_naming_the_file(tmp_path, text, message):
    path = tmp_path / "result.json"
    path.write_text(text)
    with pytest.raises(records.RecordError, match=message) as info:
        records.read_record(path)
    assert str(path) in str(info.value)


def test_the_reader_names_a_missing_or_mistyped_field(tmp_path):
    import json

    path = tmp_path / "result.json"
    for change, field in [(lambda r: r.pop("history"), "field history is missing"),
                          (lambda r: r.update(finished="yes"), "field finished is a str"),
                          (lambda r: r.update(epochs_done=True), "field epochs_done is a bool"),
                          (lambda r: r["history"][1].update(test_ebp_p="2%"), "history[1].test_ebp_p is not a number")]:
        record = _record(tmp_path)
        change(record)
        path.write_text(json.dumps(record))
        with pytest.raises(records.RecordError, match=field.replace("[", r"\[").replace("]", r"\]")):
            records.read_record(path)


def test_the_writer_refuses_an_inconsistent_record_and_writes_nothing(tmp_path):
    path = tmp_path / "result.json"
    for changes, problem in [({"final": {**_record(tmp_path)["final"], "test_ebp_p": 0.01}}, "final.test_ebp_p"),
                             ({"protocol": "paper"}, "protocol: 'paper', but its parameters give 'shortened'"),
                             ({"n_train_images": 60000}, "n_train_images: 60000"),
                             ({"epochs_done": 3}, "epochs_done: 3, but the history holds 2 epochs")]:
        with pytest.raises(records.RecordError, match="refusing to write") as info:
            records.write_record(path, _record(tmp_path, **changes))
        assert problem in str(info.value) and not path.exists()


def test_one_record_check_dispatches_on_the_method(tmp_path, monkeypatch):
    """records.record_problems is the one check of every run record: it reads the parameters as the record's method
    does (records.EXPECTED: EBP's last epoch against a tuned baseline's best-validation epoch), so the same edit is a
    problem of every method; the committed backprop and successor records pass it unchanged; a method whose check
    the registry does not find is named, not mistaken for another."""
    import json
    from pathlib import Path

    from reproduction import backprop, successors

    assert {m: records.expected_check(m) for m in records.RECORD_KINDS} == {
        "ebp": ebp_expected, "backprop": backprop.backprop_expected, "successor": successors.successor_expected}
    ebp = _record(tmp_path)
    assert records.record_problems(ebp) == []
    assert records.record_problems({**ebp, "epochs_done": 3}) == ["epochs_done: 3, but the history holds 2 epochs"]
    root = Path(records.REPO, "outputs")
    committed = {method: sorted(root.glob(f"{folder}/*/*/result.json"))
                 for method, folder in (("backprop", "backprop"), ("successor", "successors/smoke"))}
    for method, paths in committed.items():
        assert paths, method
        for path in paths:
            record = records.read_record(path)
            assert record["method"] == method and records.record_problems(record) == [], path
            written = json.loads(path.read_text())  # read as written, the format number aside (upgrade_record)
            assert written["format"] <= records.RECORD_FORMAT and {**written, "format": record["format"]} == record
            best = record["best_epoch"]
            if best is not None:
                edited = {**record, "final": {**record["final"], "test_error": 0.5}}
                assert records.record_problems(edited)[0] == (
                    f"final.test_error: 0.5, but the history's best-validation epoch has "
                    f"{record['history'][best - 1]['test_error']!r}"), path
    successor = records.read_record(committed["successor"][0])
    if successor["finished"]:
        broken = {**successor, "evaluation": {**successor["evaluation"],
                                              "packed": {**successor["evaluation"]["packed"], "mismatches": 1}}}
        assert records.record_problems(broken) == [
            "evaluation.packed.mismatches: the packed net disagrees with the float evaluation"]
    monkeypatch.setitem(records.EXPECTED, "successor", ("reproduction.successors", "no_such_check"))
    with pytest.raises(records.RecordError, match="no check of successor records: reproduction.successors.no_such"):
        records.record_problems(successor)


def test_every_record_is_written_by_write_record(tmp_path, monkeypatch):
    """The experiment's recorder writes through records.write_record (the backprop baseline's run too:
    tests/test_backprop.py reads its record back with the same reader)."""
    from reproduction import folder, parameters

    written = []
    monkeypatch.setattr(folder, "write_record", lambda path, data: written.append((path, data)))
    recorder = folder.EpochRecorder(tmp_path, parameters.RunConfig(), tmp_path / "none.npz",
                                    echo=lambda *_: None)
    recorder({"epoch": 1, "test_ebp_p": 0.2, "test_ebp_d": 0.25, "train_ebp_p": 0.1, "train_ebp_d": 0.15,
              "train_seconds": 0.5})
    [(path, data)] = written
    assert path == tmp_path / "result.json" and data["format"] == records.RECORD_FORMAT and data["method"] == "ebp"


def test_every_committed_result_is_a_consistent_record_that_agrees_with_its_notebook():
    """All committed results (EBP and backprop) read as records of the current format, consistent in themselves
    and, for finished EBP runs, with the lines their executed notebooks printed: nothing is rejected."""
    from reproduction import results

    for runs_dir in (records.REPO / "outputs" / "runs", records.REPO / "outputs" / "backprop"):
        loaded = results.load_results(runs_dir, committed_only=True)
        assert loaded and loaded.rejected == {}, loaded.rejected
        assert {r["format"] for r in loaded} == {records.RECORD_FORMAT}


def test_only_the_code_a_run_executes_makes_the_tree_dirty(tmp_path):
    """RUN_CODE_PATHS: a changed module, script or experiment notebook is dirty code; a changed README, teaching
    notebook, test or output is not."""
    import subprocess

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    files = ["ebp_lib.py", "scripts/run.py", "notebooks/experiment.ipynb", "notebooks/01_x.ipynb", "README.md",
             "tests/test_x.py", "outputs/runs/r/result.json"]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("0\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    for name in files:
        (tmp_path / name).write_text("1\n")
        state = records.git_state(tmp_path, records.RUN_CODE_PATHS)
        assert state["git_dirty"] is (name in files[:3]), (name, state)
        (tmp_path / name).write_text("0\n")


def test_code_state_refuses_dirty_code_naming_the_files_unless_allowed(monkeypatch):
    monkeypatch.setattr(records, "git_state", lambda *a, **k: {"git_commit": "abc", "git_dirty": True,
                                                              "git_changed": ["ebp_fast.py"]})
    with pytest.raises(records.DirtyTreeError, match="commit abc.*ebp_fast.py.*--allow-dirty"):
        records.code_state(allow_dirty=False)
    assert records.code_state(allow_dirty=True)["allowed_dirty"] is True


def _dirty(monkeypatch):
    monkeypatch.setattr(records, "git_state", lambda *a, **k: {"git_commit": "abc", "git_dirty": True,
                                                              "git_changed": ["ebp_lib.py"]})


def test_a_run_of_the_paper_protocol_does_not_start_from_dirty_code_unless_allowed(monkeypatch, tmp_path):
    from reproduction import folder, parameters

    _dirty(monkeypatch)
    monkeypatch.delenv(records.ALLOW_DIRTY_VAR, raising=False)
    paper = parameters.RunConfig(n_train=None, epochs=120)
    shortened = paper.replace(n_train=1000, epochs=2)
    with pytest.raises(records.DirtyTreeError, match="ebp_lib.py"):
        folder.EpochRecorder(tmp_path, paper, tmp_path / "checkpoint.npz", echo=lambda *_: None)
    assert folder.EpochRecorder(tmp_path, shortened, tmp_path / "c.npz").session["git_changed"] == ["ebp_lib.py"]
    monkeypatch.setenv(records.ALLOW_DIRTY_VAR, "1")
    assert folder.EpochRecorder(tmp_path, paper, tmp_path / "c.npz").session["git_dirty"] is True


def test_run_tables_refuses_a_quoted_profile_from_dirty_code_and_passes_the_flag_to_every_job(monkeypatch, capsys,
                                                                                             tmp_path):
    script = load_script("run_tables")
    _dirty(monkeypatch)
    batches = []
    monkeypatch.setattr(script.runner, "run_batch", lambda jobs, *a, **k: batches.append(jobs) or {})
    monkeypatch.setattr(script.runner, "summary", lambda *a: "")
    monkeypatch.setattr(script.runner, "exit_status", lambda *a: 0)
    base = ["binary-200", "--runs-dir", str(tmp_path), "--data-dir", str(tmp_path)]
    assert script.main(base + ["--profile", "paper"]) == 2
    assert "profile paper" in capsys.readouterr().err and batches == []
    assert script.main(base + ["--profile", "paper", "--allow-dirty"]) == 0
    assert all(job.environment[records.ALLOW_DIRTY_VAR] == "1" for job in batches[-1])
    assert script.main(base + ["--profile", "quick"]) == 0
    assert all(records.ALLOW_DIRTY_VAR not in job.environment for job in batches[-1])


def test_a_batch_stops_at_code_changed_under_it_and_keeps_the_runs_before(tmp_path, capsys):
    """tuned.run_jobs: the first run finishes, the second finds the tree changed (DirtyTreeError): the batch stops
    with exit status 2 naming the run it stopped before, and the third never starts."""
    from reproduction import tuned
    started = []

    def run(params, folder, data_dir=None, allow_dirty=False):
        started.append(folder.name)
        if folder.name == "b":
            raise records.DirtyTreeError("the code differs from commit abc (ebp_lib.py)")

    jobs = [({"dataset": "mnist"}, tmp_path / name) for name in "abc"]
    assert tuned.run_jobs(jobs, run, lambda folder, params: "finished", allow_dirty=True) == 2
    assert started == ["a", "b"]
    out, err = capsys.readouterr()
    assert "mnist a: finished" in out and "ebp_lib.py" in err and "Stopped before mnist b" in err
