#!/usr/bin/env python
"""Per-image test predictions of the committed successor runs' deployed ±1 nets, recomputed from their
binary_net.npz (reproduction.successors writes them itself for new runs: predictions.npz).

For each finished run under outputs/successors/<profile>/<dataset>/<run>/ without a predictions.npz: the test
images preprocessed as the run chose (its grid's choice, statistics from its 50,000 fit images:
successors.load_split), its packed net (ebp_binary_format.load_packed) predicts every test image (ebp_binary.predict,
engine "auto", as its evaluation did), the error is checked against the record's (evaluation.packed.error: the
same images must be wrong, so the counts agree exactly), and the predicted classes are written as
predictions.npz {"deployed": uint8 per image} (run_files.save_predictions; about 5 kB a run).
BayesBiNN's predictive cannot be recomputed: λ was deleted with the checkpoint; its new runs keep it.

  python scripts/successor_predictions.py                  # every committed tuned run
  python scripts/successor_predictions.py --profile smoke
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reproduction import records, run_files
from reproduction import successors as sc


def recompute(folder: Path, record: dict, data_for, echo=print) -> bool:
    """Write folder/PREDICTIONS_FILE from folder/NET_FILE (see the module's docstring); False (said through
    `echo`) where the record's error is not reproduced, and nothing is written then."""
    import ebp_binary as eb
    import ebp_binary_format
    params = record["parameters"]
    data = data_for(params, record["grid"]["chosen"]["preprocessing"])
    packed = ebp_binary_format.load_packed(folder / sc.NET_FILE)
    predicted = eb.predict(packed, data["x_test"], engine="auto")
    wrong, recorded = int((predicted != data["y_test"]).sum()), round(record["evaluation"]["packed"]["error"] *
                                                                      len(data["y_test"]))
    if wrong != recorded:
        echo(f"{folder}: {wrong} test images wrong, the record says {recorded}; nothing written")
        return False
    run_files.save_predictions(folder / run_files.PREDICTIONS_FILE, {"deployed": predicted})
    echo(f"{folder}: {wrong} wrong, as recorded; {run_files.PREDICTIONS_FILE} written")
    return True


def cached_split():
    """data_for(params, preprocessing): successors.load_split, kept per data set, split and preprocessing (runs
    of other seeds share them)."""
    cache: dict = {}

    def data_for(params, preprocessing):
        key = (params["method"] in ("ebp-tuned", "ebp-tuned-dropout"), params["dataset"], params["n_train"],
               params["n_validation"], preprocessing)
        if key not in cache:
            cache[key] = sc.load_split(params, preprocessing)
        return cache[key]
    return data_for


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="tuned")
    parser.add_argument("--out", default=sc.OUTPUT_DIR, help="default: outputs/successors")
    args = parser.parse_args(argv)
    data_for, failed = cached_split(), 0
    for path in sorted(Path(args.out, args.profile).glob("*/*/result.json")):
        folder = path.parent
        if (folder / run_files.PREDICTIONS_FILE).exists():
            continue
        record = records.read_record(path)
        if not record["finished"] or not (folder / sc.NET_FILE).exists():
            print(f"{folder}: unfinished or without {sc.NET_FILE}; skipped")
            continue
        failed += not recompute(folder, record, data_for)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
