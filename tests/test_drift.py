"""Today's code against the code that trained the records, so that drift can never go unnoticed.

Almost every record was trained by a commit whose training files differ from today's. For each variant of the
records (data set, table, dropout reading, mask reading, real-weight update, weights) the fixture
tests/drift_fixtures.json holds one record, anchored: the commit that wrote the fixture (anchored_by) retrained that
record's first epoch on all its training images and got its four recorded errors exactly; then trained the record's
configuration for one epoch on its first FIXTURE_IMAGES (500) training images and kept the four errors. Today's code
must give those four numbers exactly (python tests/test_drift.py regenerates the fixture, a full epoch per variant:
reproduction.verify.fixture_entry). What it covers: every code path a variant's epoch takes (network, update,
dropout, masks, engine, seed, the data's preprocessing) on 500 training images; the full epoch of any record is
`python -m reproduction.verify --today RUN_FOLDER`. A second test replays epoch 1 of real quick records (8,000
images) exactly, one per Table 2-4 variant and weights: today's code against the records of their own commit.
"""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

from reproduction import parameters, records, verify

FIXTURES = Path(__file__).with_name("drift_fixtures.json")
RUNS = records.REPO / "outputs" / "runs"
# One quick record per (table, dropout reading, weights): Tables 2, 3 (sampled and analytic) and 4, binary and real.
QUICK_RECORDS = ("binary-200", "real-200", "binary-200-dropout-sampled", "real-200-dropout-sampled",
                 "binary-200-dropout-analytic", "real-200-dropout-analytic", "binary-block17", "real-block17")


def variant(params: dict) -> tuple:
    """(data set, table, dropout reading, mask reading, update, weights) of a record's parameters."""
    table = 4 if parameters.is_spatial(params["architecture"]) else (3 if params["dropout"] else 2)
    return (params["dataset"], table, params["dropout"], params["mask_reading"], params["update"],
            params["weights"])


def hidden_units(architecture: str) -> int:
    """The hidden units of a paper architecture (a cost measure: the cheapest record of a variant is its fixture)."""
    return sum(spec if isinstance(spec, int) else (parameters.INPUT_SIDE - spec[1] + 1) ** 2
               for spec in parameters.architecture_layers(architecture)[:-1])


def candidates_per_variant(runs=RUNS) -> dict[tuple, list[Path]]:
    """{variant: run folders} of the finished records of each variant, cheapest first (fewest hidden units, seed 0
    first)."""
    found = collections.defaultdict(list)
    for path in sorted(Path(runs).glob("*/*/result.json")):
        record = records.read_record(path)
        if record["finished"] and record["method"] == "ebp":
            p = record["parameters"]
            found[variant(p)].append((hidden_units(p["architecture"]), p["seed"], path.parent))
    return {key: [entry[2] for entry in sorted(entries)] for key, entries in found.items()}


def regenerate(out=FIXTURES, tries: int = 3) -> None:
    """Write tests/drift_fixtures.json: fixture_entry of the cheapest record of every variant that today's code
    replays exactly (up to `tries` records per variant, each a full epoch; one that does not is named)."""
    entries = []
    for key, run_dirs in sorted(candidates_per_variant().items(), key=str):
        for run_dir in run_dirs[:tries]:
            try:
                entries.append(verify.fixture_entry(run_dir))
            except verify.VerifyError as err:  # the next record of the variant is tried
                print(f"{key}: {err}", flush=True)
                continue
            print(key, entries[-1]["record"], entries[-1]["epoch_1"], flush=True)
            records.write_json(out, {"images": verify.FIXTURE_IMAGES, "fixtures": entries})
            break


def _fixtures() -> list[dict]:
    return json.loads(FIXTURES.read_text())["fixtures"] if FIXTURES.exists() else []


def test_the_fixture_holds_one_record_of_every_variant_of_the_records():
    """A variant without a fixture would drift unseen: every variant the committed records hold has one."""
    fixtures = {variant(parameters.validate_parameters(f["parameters"])) for f in _fixtures()}
    assert set(candidates_per_variant()) <= fixtures


@pytest.mark.parametrize("fixture", _fixtures(), ids=lambda f: f["record"])
def test_todays_code_gives_each_variants_first_epoch_as_its_recorded_commit_did(fixture, real_data_dir, monkeypatch):
    monkeypatch.setenv("EBP_DATA_DIR", str(real_data_dir))
    replayed = verify.train_today(fixture["parameters"], fixture["engine"], 1)[0]
    assert {k: replayed[k] for k in records.HISTORY_ERRORS["ebp"]} == fixture["epoch_1"], fixture["record"]


@pytest.mark.parametrize("run", QUICK_RECORDS)
def test_todays_code_replays_epoch_1_of_a_quick_record_exactly(run, real_data_dir, monkeypatch):
    monkeypatch.setenv("EBP_DATA_DIR", str(real_data_dir))
    epochs, verdict = verify.verify_today(RUNS / "quick" / run, 1)
    assert verdict == "exact", epochs


if __name__ == "__main__":
    sys.exit(regenerate())
