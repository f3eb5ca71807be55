"""The authors' MATLAB code run in GNU Octave against ebp_lib (scripts/authors_code_octave.py): the committed
record, and a fresh run where Octave and a clone of the authors' repository are available (EBP_AUTHORS_CODE names
the clone; the code carries no licence, so the repository cannot include it and CI has neither)."""
import json
import os
import shutil
from pathlib import Path

import pytest

from scripts import authors_code_octave

RECORD = Path(__file__).resolve().parent.parent / "outputs" / "authors_code" / "octave.json"


def check(record: dict) -> None:
    """Every case agrees within the tolerance at every epoch, every control disagrees by far more, and the cases
    are the script's: the code of March 2015 and the fixed code for binary weights, the real-weight code."""
    cases = {(c["file"], c["commit"], c["update"]) for c in record["cases"]}
    assert cases == {(f"Learning_Algorithms/{name}", commit, update)
                     for _, name, commit, update, _ in authors_code_octave.CASES}
    for case in record["cases"]:
        assert len(case["per_epoch"]) == record["epochs"] >= 1
        assert all(r["h"] <= record["tolerance"] and r["b"] <= record["tolerance"] for r in case["per_epoch"]), case
        assert max(r["h"] for r in case["control_per_epoch"]) > 1e3 * record["tolerance"], case


def test_committed_record_shows_agreement_and_the_controls_disagree():
    record = json.loads(RECORD.read_text())
    assert record["tolerance"] == authors_code_octave.TOLERANCE and not record["machine"]["git_dirty"]
    check(record)


@pytest.mark.skipif(shutil.which("octave") is None or not os.environ.get("EBP_AUTHORS_CODE"),
                    reason="needs GNU Octave and EBP_AUTHORS_CODE=<a git clone of EBP_Matlab_Code>")
def test_a_fresh_octave_run_agrees(tmp_path):
    out = tmp_path / "octave.json"
    assert authors_code_octave.main([os.environ["EBP_AUTHORS_CODE"], "--out", str(out), "--n-train", "200",
                                     "--epochs", "2"]) == 0
    check(json.loads(out.read_text()))
