"""Reading results back: the committed runs into the cells of the paper's tables, and the tables as Markdown.

load_results reads every result.json under outputs/runs (or the versions committed to git); table_cells gives
each cell of the paper's tables its results of one profile, dropout reading and mask reading, seeds pooled as
mean ± SD (Cell); render_table writes a table as notebooks/tables.ipynb shows it, paper beside ours, and
render_dataset_table the same table on MNIST beside Fashion-MNIST (runs in outputs/runs/<profile>-fashion-mnist/).
"""
from __future__ import annotations

import html
import math
import re
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import ebp_checkpoint
import ebp_data
from ebp_lib import DEFAULT_MASK_READING, DEFAULT_UPDATE, update_applies
from reproduction import band
from reproduction.folder import (
    CHECKPOINT_FILE,
    EXECUTED_FILE,
    RESULT_FILE,
    RUNS_DIR,
    VERIFICATION_FILE,
    checkpoint_problems,
    evidence_problems,
    expected_run_folder,
    results_folder,
    run_key,
    split_results_folder,
)
from reproduction.paper_tables import ROW_LABELS, TABLE_TITLES
from reproduction.parameters import DROPOUT_READINGS, MASK_READINGS, profile_label
from reproduction.records import (
    MAX_JSON_BYTES,
    NewerRecordError,
    RecordError,
    parse_record,
    record_problems,
    upgrade_files,
)


def _committed_files(runs_dir, names=(RESULT_FILE, EXECUTED_FILE, VERIFICATION_FILE)) -> dict[str, bytes]:
    """{path relative to runs_dir: contents} of every file named one of `names` committed in a run folder
    <runs_dir>/<folder>/<run>/ (HEAD's version)."""
    runs_dir = Path(runs_dir).resolve()
    top = subprocess.run(["git", "-C", str(runs_dir), "rev-parse", "--show-toplevel"], capture_output=True,
                         text=True, check=True).stdout.strip()
    prefix = runs_dir.relative_to(Path(top).resolve()).as_posix()
    listing = subprocess.run(["git", "-C", top, "ls-tree", "-r", "HEAD", "--", prefix], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    blobs = {line.split("\t", 1)[1]: line.split()[2] for line in listing
             if line.rsplit("/", 1)[-1] in names and line.split("\t", 1)[1].count("/") == prefix.count("/") + 3}
    if not blobs:
        return {}
    data = subprocess.run(["git", "-C", top, "cat-file", "--batch"], capture_output=True, check=True,
                          input=("\n".join(blobs.values()) + "\n").encode()).stdout
    out, pos = {}, 0
    for path in blobs:  # each object comes back as "<sha> blob <size>\n<contents>\n", in the order asked
        header_end = data.index(b"\n", pos)
        size = int(data[pos:header_end].split()[2])
        out[Path(path).relative_to(prefix).as_posix()] = data[header_end + 1:header_end + 1 + size]
        pos = header_end + 1 + size + 1
    return out


class Results(list):
    """What load_results read: the usable run records (a list), and `rejected`, {run folder relative to the runs
    folder, e.g. 'paper/binary-200': (kind, why)} for every result.json that no table may use: kind 'unreadable'
    (not a run record), 'inconsistent' (at odds with itself, its checkpoint or its executed notebook),
    'unverified' (a finished run without its executed notebook or a replay vouching for it) or 'newer-format'
    (written by a newer version of the project)."""

    def __init__(self, records=(), rejected=None):
        super().__init__(records)
        self.rejected = dict(rejected or {})


def _disk_files(runs_dir) -> dict[str, bytes | OSError]:
    """{path relative to runs_dir: contents} of every result.json in a run folder under runs_dir (the OSError for
    one that cannot be read), and of the executed notebook and verification record beside it if they can be read
    (at most MAX_JSON_BYTES + 1 bytes of each: the parser refuses more)."""
    out = {}
    for path in Path(runs_dir).glob(f"*/*/{RESULT_FILE}"):
        for name in (RESULT_FILE, EXECUTED_FILE, VERIFICATION_FILE):
            try:
                with open(path.with_name(name), "rb") as f:
                    out[path.with_name(name).relative_to(runs_dir).as_posix()] = f.read(MAX_JSON_BYTES + 1)
            except OSError as err:
                if name == RESULT_FILE:
                    out[path.relative_to(runs_dir).as_posix()] = err
    return out


def _problems(result: dict, files: dict, run_path: Path, run: str) -> tuple[str, list[str]]:
    """(kind, problems) of a run record: ('inconsistent', ...) for record_problems, and for a finished EBP run
    what its executed notebook printed and, on disk, a checkpoint left beside it (reproduction.folder);
    ('unverified', ...) for a finished EBP run without its evidence (folder.evidence_problems); else ('replayed'
    or 'notebook', []) for a finished EBP run, ('ok', []) for the others."""
    problems = [f"{RESULT_FILE}: {p}" for p in record_problems(result)]
    if problems:
        return "inconsistent", problems
    if result["method"] != "ebp" or not result["finished"]:
        return "ok", []
    kind, problems = evidence_problems(result, files[f"{run}/{RESULT_FILE}"], files.get(f"{run}/{EXECUTED_FILE}"),
                                       files.get(f"{run}/{VERIFICATION_FILE}"), run_path)
    checkpoint = run_path / CHECKPOINT_FILE
    if checkpoint.is_file():
        try:
            meta = ebp_checkpoint.read_network_meta(checkpoint)
        except ebp_checkpoint.CheckpointError:
            meta = None
        if meta is not None:
            theirs = checkpoint_problems(result, meta, RESULT_FILE, CHECKPOINT_FILE)
            kind, problems = ("inconsistent", problems + theirs) if theirs else (kind, problems)
    return kind, problems


def load_results(runs_dir=RUNS_DIR, committed_only: bool = False) -> Results:
    """Every run record (result.json, finished or not) under runs_dir, sorted by path, each with its `profile`
    (the folder above the run's, less its data set suffix: split_results_folder) and `run_dir` (relative to
    runs_dir) added. A result.json that is not a run record, or whose fields disagree with each other, with the
    lines its executed notebook printed or with a checkpoint beside it, is not among them: Results.rejected names
    it and why, and the tables show it as such. An EBP result lying in the folder of another data set than it was
    trained on is an error (ValueError naming the file): a misplaced result must not pass for a run of its
    folder's data set.

    committed_only: read the versions committed to git (HEAD) instead of the files on disk, so runs in
    progress in the working tree do not change what a committed, CI-checked notebook shows.
    """
    files = None
    if committed_only:
        try:
            files = _committed_files(runs_dir)
        except (OSError, subprocess.CalledProcessError):  # not a git checkout (e.g. an archive): read the disk
            files = None
    if files is None:
        files = _disk_files(runs_dir)
    out, rejected = [], {}
    for relative in sorted(k for k in files if k.endswith("/" + RESULT_FILE)):
        folder, run = relative.split("/")[:2]
        run_path = Path(runs_dir) / folder / run
        try:
            if isinstance(files[relative], OSError):
                raise RecordError(f"{run_path / RESULT_FILE}: cannot be read ({files[relative].strerror})")
            result = parse_record(files[relative], run_path / RESULT_FILE)
        except NewerRecordError as err:
            rejected[f"{folder}/{run}"] = ("newer-format", str(err))
            continue
        except RecordError as err:
            rejected[f"{folder}/{run}"] = ("unreadable", str(err))
            continue
        kind, problems = _problems(result, files, run_path, f"{folder}/{run}")
        if problems:
            rejected[f"{folder}/{run}"] = (kind, "; ".join(problems))
            continue
        misplaced = placement_problem(result, folder, run, run_path / RESULT_FILE)
        if misplaced:
            rejected[f"{folder}/{run}"] = ("misplaced", misplaced)
            continue
        if result["epochs_done"]:
            result["replayed"] = kind == "replayed"
            result["profile"], result["run_dir"] = split_results_folder(folder)[0], f"{folder}/{run}"
            out.append(result)
    return Results(out, rejected)


def placement_problem(result: dict, folder: str, run: str, path) -> str | None:
    """Why an EBP result (`path`) does not belong in its folder <folder>/<run>/, or None: trained on another data set
    than `folder` stands for (results_folder), or on another configuration than `run` names (its weights,
    architecture, dropout, mask reading, update and seed: folder.expected_run_folder), so that a binary run left in a
    real-weight folder never fills the binary cells. Results of other methods (the backprop baseline, read by the
    same functions from outputs/backprop/<dataset>/) have their own layout and are not checked."""
    if result["method"] != "ebp":
        return None
    trained = result["parameters"]["dataset"]
    profile, expected = split_results_folder(folder)
    if trained != expected:
        return (f"{path} was trained on {trained} but lies in {folder}/, the folder of {expected} runs; move its run "
                f"folder to {results_folder(profile, trained)}/")
    named = expected_run_folder(result["parameters"])
    if run != named:
        return f"{path} lies in {folder}/{run}/, but its parameters are those of {folder}/{named}/; move it there"
    return None


def results_of(results: list[dict], profile: str, dataset: str = "mnist") -> Results:
    """The results (load_results) of one profile trained on one data set, and those rejected in its folder."""
    rejected = {run_dir: why for run_dir, why in getattr(results, "rejected", {}).items()
                if run_dir.split("/")[0] == results_folder(profile, dataset)}
    return Results([r for r in results if r["profile"] == profile and r["parameters"]["dataset"] == dataset],
                   rejected)


# Which results fill a table: one profile (the tables notebook's `profile`), and for Table 3 the dropout reading,
# for Table 4 the mask reading. Table 3 shows the sampled reading first, the paper's text (Sect. 4: "p = 0.8 for
# both hidden units and input units", after Srivastava et al.); the analytic one is the authors' code.
READING_TITLES = {"sampled": "sampled dropout: Bernoulli masks on the inputs and hidden units (the paper's text)",
                  "analytic": "analytic dropout: the input's variance term only (the authors' code)"}
MASK_TITLES = {"absent": "weights outside each unit's block absent",
               "held": "weights outside each unit's block held at h = 0 (the paper's full matrix)"}
# Why load_results rejects a result.json (Results.rejected): not a record, at odds with itself or its evidence, a
# finished run without its evidence (folder.evidence_problems), a record format newer than this code, a record in
# the folder of another data set or run (placement_problem).
REJECTED_KINDS = ("unreadable", "inconsistent", "unverified", "newer-format", "misplaced")
TEST_IMAGES = 10000     # every error is a fraction of the 10,000 test images (MNIST and Fashion-MNIST alike)
LAST_EPOCHS = 10        # the last-epochs mean beside the paper's rule (the error after the last epoch)


def seed_of(result: dict) -> int:
    """The seed a result was trained with."""
    return result["parameters"]["seed"]


def row_update(row: dict, update: str) -> str:
    """The update that trains a table row's runs when `update` is asked for: `update` where it applies to the
    row's weight type (ebp_lib.update_applies), else the spec's."""
    return update if update_applies(update, row["weights"]) else DEFAULT_UPDATE


def matches(row: dict, result: dict, reading: str = "sampled", seed: int | None = 0,
            mask_reading: str = DEFAULT_MASK_READING, update: str = DEFAULT_UPDATE) -> bool:
    """Whether a result was trained in the configuration of a table row (with the paper's defaults for the
    data: MNIST, per-pixel standardisation, reference initialisation), with seed `seed` (None: any seed), the
    dropout reading `reading` (Table 3), the mask reading `mask_reading` (Table 4; the other tables have no
    masks, so only results of the default reading fill them) and the update `update` where it applies to the
    row's weights (row_update)."""
    p = result["parameters"]
    dropout = reading if row["dropout"] == "yes" else None
    masks = mask_reading if row["table"] == 4 else DEFAULT_MASK_READING
    return (p["dataset"] == row["dataset"] and p["architecture"] == row["architecture"]
            and p["weights"] == row["weights"] and p["dropout"] == dropout
            and (dropout is None or p["keep"] == row["keep"]) and p["mask_reading"] == masks
            and p["update"] == row_update(row, update)
            and p["preprocessing"] == "pixel" and p["std_floor"] == 0 and p["init_scale"] == 1
            and (seed is None or seed_of(result) == seed))


def completeness(result: dict) -> tuple:
    """Sort key, larger = more complete: the paper's protocol finished, then finished over unfinished (a finished
    run has its evidence, load_results; an unfinished one has none to need), then training images seen, then the
    paper profile over others."""
    paper_done = result["protocol"] == "paper" and result["finished"]
    return (paper_done, result["finished"], result["epochs_done"] * result["n_train_images"],
            result["profile"] == "paper")


def seeds_run(results: list[dict]) -> list[int]:
    """The seeds that results were trained with, sorted."""
    return sorted({seed_of(r) for r in results})


def binomial_se(error: float, n: int = TEST_IMAGES) -> float:
    """The binomial standard error sqrt(e(1 − e)/n) of a test error `error` in percent, in percent."""
    e = error / 100
    return 100 * math.sqrt(max(e * (1 - e), 0.0) / n)


def last_epochs_mean(result: dict, output: str, k: int = LAST_EPOCHS) -> float:
    """Mean test error (percent) of `output` (ebp_p or ebp_d) over the last k epochs of a run (all of them if
    it has fewer): epochs 111-120 of a paper-protocol run."""
    tail = result["history"][-k:]
    return 100 * sum(h[f"test_{output}"] for h in tail) / len(tail)


def _mean_sd(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for a single value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


@dataclass
class Cell:
    """Our numbers for one table cell (one output of one configuration). `pooled`: one result per seed, all of
    the most complete protocol among the seeds (same epochs done and training images, all finished or none);
    `others`: the other seeds' most complete results (unfinished ones), shown but not pooled."""
    row: dict
    pooled: list
    others: list = field(default_factory=list)

    @property
    def seeds(self) -> list[int]:
        return [seed_of(r) for r in self.pooled]

    @property
    def errors(self) -> list[float]:
        """The paper's rule for each seed: the test error (percent) after the last epoch."""
        return [100 * r["final"][f"test_{self.row['output']}"] for r in self.pooled]

    @property
    def mean(self) -> float:
        return _mean_sd(self.errors)[0]

    @property
    def sd(self) -> float | None:
        """The standard deviation over seeds (None for one seed)."""
        return _mean_sd(self.errors)[1]

    @property
    def last_epochs(self) -> tuple[float, float | None]:
        """(mean, SD over seeds) of each seed's mean test error over its last LAST_EPOCHS epochs."""
        return _mean_sd([last_epochs_mean(r, self.row["output"]) for r in self.pooled])

    @property
    def finished(self) -> bool:
        return all(r["finished"] for r in self.pooled)


class Cells(dict):
    """table_cells' answer: cell_key -> Cell, and `rejected`, cell_key -> [(seed, kind, run folder, why)] for the
    cells' runs whose result.json was rejected (Results.rejected: unreadable or inconsistent)."""

    def __init__(self, cells=(), rejected=None):
        super().__init__(cells)
        self.rejected = dict(rejected or {})


def rejected_runs(row: dict, rejected: dict, profile: str, reading: str, mask_reading: str,
                  update: str = DEFAULT_UPDATE) -> list[tuple]:
    """[(seed, kind, run folder, why)] of the rejected results (Results.rejected) lying in the folders of a table
    row's run: <results_folder(profile, its data set)>/<run_key(...)>[-seed<N>]."""
    base = run_key(row["run_id"], reading if row["dropout"] == "yes" else None, 0,
                   mask_reading if row["table"] == 4 else DEFAULT_MASK_READING, row_update(row, update))
    pattern = re.compile(re.escape(base) + r"(?:-seed(\d+))?")
    out = []
    for run_dir, (kind, why) in sorted(rejected.items()):
        folder, run = run_dir.split("/")
        match = pattern.fullmatch(run)
        if match and folder == results_folder(profile, row["dataset"]):
            out.append((int(match[1] or 0), kind, run_dir, why))
    return out


def cell_key(row: dict) -> tuple:
    """(table, row, column) of a table row, e.g. (3, "B-EBP-P", "[200,200]")."""
    return row["table"], row["row"], row["column"]


def table_cells(rows: list[dict], results: list[dict], profile: str = "paper", reading: str = "sampled",
                mask_reading: str = DEFAULT_MASK_READING, update: str = DEFAULT_UPDATE) -> Cells:
    """cell_key -> Cell for every table row that has a result of `profile` in the given dropout and mask
    readings and the update `update` where it applies to a row's weights (absent when none exists yet;
    the rows of the other weight type are left out). Per seed the most complete result counts; the seeds whose result
    shares the most complete protocol are pooled (a seed still training is listed, not pooled). Only results of
    the rows' data set fill them (matches): dataset_rows(rows, "fashion-mnist") gives the Fashion-MNIST cells.
    The rows' runs whose result.json was rejected (load_results) are in Cells.rejected, so that a table says so
    instead of 'not run yet'."""
    if reading not in DROPOUT_READINGS:
        raise ValueError(f"unknown dropout reading {reading!r}; choose one of {', '.join(DROPOUT_READINGS)}")
    if mask_reading not in MASK_READINGS:
        raise ValueError(f"unknown mask reading {mask_reading!r}; choose one of {', '.join(MASK_READINGS)}")
    of_profile = [r for r in results if r["profile"] == profile]
    cells = Cells()
    for row in rows:
        if not update_applies(update, row["weights"]):
            continue
        refused = rejected_runs(row, getattr(results, "rejected", {}), profile, reading, mask_reading, update)
        if refused:
            cells.rejected[cell_key(row)] = refused
        per_seed = {}
        for result in of_profile:
            if matches(row, result, reading, None, mask_reading, update):
                seed = seed_of(result)
                if seed not in per_seed or completeness(result) > completeness(per_seed[seed]):
                    per_seed[seed] = result
        if not per_seed:
            continue
        top = max(per_seed.values(), key=completeness)

        def protocol(r):
            return r["finished"], r["epochs_done"], r["n_train_images"]
        ordered = [per_seed[s] for s in sorted(per_seed)]
        cells[cell_key(row)] = Cell(row, [r for r in ordered if protocol(r) == protocol(top)],
                                    [r for r in ordered if protocol(r) != protocol(top)])
    return cells


def seeds_label(cells: list[Cell]) -> str:
    """Which seeds fill the cells, e.g. 'seed 0 (one per cell)' or 'seeds 0, 1, 2 (3 per cell in 12 cells, 1 in 20)'."""
    if not cells:
        return "no runs yet"
    seeds = sorted({s for c in cells for s in c.seeds})
    counts = {}
    for c in cells:
        counts[len(c.pooled)] = counts.get(len(c.pooled), 0) + 1
    if len(counts) == 1 and 1 in counts:
        return f"seed {seeds[0]} (one run per cell)"
    parts = [f"{n} per cell in {k} cells" for n, k in sorted(counts.items(), reverse=True)]
    return f"seeds {', '.join(map(str, seeds))} ({'; '.join(parts)}; mean ± SD over seeds)"


def table_title(table: int, reading: str | None = None, mask_reading: str | None = None) -> str:
    """The title of one rendered table: the paper's, plus the reading it shows."""
    title = TABLE_TITLES[table]
    if table == 3 and reading:
        title += f", {READING_TITLES[reading]}"
    if table == 4 and mask_reading:
        title += f", {MASK_TITLES[mask_reading]}"
    return title


def finished_errors(cells: dict) -> dict:
    """{cell key: per-seed errors} of the finished cells: what band.family_spreads pools."""
    return {key: cell.errors for key, cell in cells.items() if cell.finished}


def paper_band(row: dict, cell: Cell | None, spreads: dict | None = None) -> dict | None:
    """Whether the paper's number could be one more run of ours (band.prediction_band): ours − paper, the
    tolerance t·s·sqrt(1 + 1/n), `outside`; s: the cell's in `spreads` ({cell key: Spread},
    band.family_spreads: its family's, or its part's where the family's cells are unalike). None when the cell is
    not run or unfinished, the row has no paper number (another data set), or it has no spread (one seed per cell)."""
    paper = row.get("paper_error")
    if cell is None or paper is None or not cell.finished:
        return None
    return band.prediction_band(cell.errors, paper, (spreads or {}).get(cell_key(row)))


NBSP = "\u00a0"  # a no-break space: '3.34 ± 0.11' stays on one line in a narrow column
OUTSIDE_MARK = "†"  # a rendered cell whose paper number lies outside our band (paper_band)
REPLAYED_MARK = "⟲"  # a rendered cell with a run whose first epochs were replayed and agreed (reproduction.verify)


def replayed(cell: Cell | None) -> bool:
    """Whether a run the cell pools was replayed (its verification.json vouches for its record)."""
    return cell is not None and any(r.get("replayed") for r in cell.pooled)


def _rejected_text(cell: Cell | None, refused: list[tuple]) -> str:
    """What a cell says of its runs' rejected results: 'unreadable result.json' (or inconsistent) where it has
    no usable result, ' · seed 1: inconsistent result.json' beside the seeds it has."""
    if cell is None:
        return " · ".join(f"{kind} result.json" + (f" (seed {seed})" if seed else "") for seed, kind, _, _ in refused)
    return "".join(f" · seed {seed}: {kind} result.json" for seed, kind, _, _ in refused if seed not in cell.seeds)


def _cell_text(row: dict, cell: Cell | None, last_label: str, refused: list[tuple] = (),
               spreads: dict | None = None) -> str:
    """One cell of a rendered table: 'paper / ours (ours − paper); last k: ...', or what is missing; a rejected
    result.json of its run (`refused`: Cells.rejected) is named; OUTSIDE_MARK where the paper lies outside the
    band of its family's spread (`spreads`, paper_band)."""
    paper = row["paper_error"]
    if cell is None:
        return f"{paper:.2f} / {_rejected_text(None, refused) if refused else 'not run yet'}"
    text = f"{paper:.2f} / {cell.mean:.2f}"
    if cell.sd is not None:
        text += f" ± {cell.sd:.2f} (n = {len(cell.pooled)})"
    text += f" ({cell.mean - paper:+.2f})"
    if (paper_band(row, cell, spreads) or {}).get("outside"):
        text += f" {OUTSIDE_MARK}"
    if replayed(cell):
        text += f" {REPLAYED_MARK}"
    if cell.finished:
        last, last_sd = cell.last_epochs
        text += f"; {last_label}: {last:.2f}" + ("" if last_sd is None else f" ± {last_sd:.2f}")
    else:
        text += f" · {cell.pooled[0]['epochs_done']}/{cell.pooled[0]['parameters']['epochs']} ep"
    for other in cell.others:
        text += f" · seed {seed_of(other)}: {other['epochs_done']}/{other['parameters']['epochs']} ep"
    return text + _rejected_text(cell, refused)


def render_table(table: int, rows: list[dict], cells: dict, profile: str, reading: str | None = None,
                 mask_reading: str | None = None, spreads: dict | None = None) -> str:
    """One paper table as Markdown, transposed (one line per architecture, one column per output), labelled
    with its reading, profile and seeds. Every cell: 'paper / ours (ours − paper); last 10: mean of the last
    ten epochs', ours ± SD over seeds (n) where several; an unfinished run shows its epochs done; OUTSIDE_MARK
    where the paper lies outside the prediction band, s pooled per family: `spreads` ({family: Spread}), by
    default those of `cells` themselves."""
    spreads = band.family_spreads(finished_errors(cells)) if spreads is None else spreads
    rows = [r for r in rows if r["table"] == table]
    columns = list(dict.fromkeys(r["column"] for r in rows))
    by_cell = {(r["column"], r["row"]): r for r in rows}
    filled = [cells[cell_key(r)] for r in rows if cell_key(r) in cells]
    k = min([LAST_EPOCHS] + [r["epochs_done"] for c in filled if c.finished for r in c.pooled])  # 3 for quick
    lines = [f"**{table_title(table, reading, mask_reading)}** — profile {profile_label(profile)}; "
             f"{seeds_label(filled)}. Test error %, paper / ours (ours − paper); last {k}: our mean "
             f"over the last {k} epochs (the paper reports the error after the last epoch); {OUTSIDE_MARK}: the "
             f"paper's number lies outside our {band.LEVEL:.0%} prediction band for one more run (t·s·sqrt(1 + 1/n),"
             f" s pooled over the row's cells of this table)."
             + (f" {REPLAYED_MARK}: a run of the cell was replayed from its recorded commit and agreed "
                f"(verification.json)." if any(map(replayed, filled)) else ""),
             "", "| hidden | " + " | ".join(ROW_LABELS) + " |", "|---" * (len(ROW_LABELS) + 1) + "|"]
    for column in columns:
        entries = [_cell_text(by_cell[(column, label)], cells.get(cell_key(by_cell[(column, label)])), f"last {k}",
                              getattr(cells, "rejected", {}).get(cell_key(by_cell[(column, label)]), []), spreads)
                   for label in ROW_LABELS]
        lines.append(f"| {column} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


def _scan_ours(cell: Cell | None, refused: list[tuple], n: int) -> str:
    """Our number of one cell for render_scan_table: '3.34 ± 0.11' (no-break spaces: a number never wraps), its
    seed count where it is not the table's usual `n`, its epochs done while training, or what is missing."""
    if cell is None:
        return _rejected_text(None, refused) if refused else "not run yet"
    text = f"{cell.mean:.2f}" + ("" if cell.sd is None else f"{NBSP}±{NBSP}{cell.sd:.2f}")
    if len(cell.pooled) != n:
        text += f" (n = {len(cell.pooled)})"
    if not cell.finished:
        text += f" · {cell.pooled[0]['epochs_done']}/{cell.pooled[0]['parameters']['epochs']} ep"
    return text


def _scan_delta(row: dict, cell: Cell | None, spreads: dict) -> str:
    """ours − paper of one finished cell, with OUTSIDE_MARK where the paper lies outside our band; '' else."""
    if cell is None or not cell.finished:
        return ""
    outside = (paper_band(row, cell, spreads) or {}).get("outside")
    return f"{cell.mean - row['paper_error']:+.2f}" + (f" {OUTSIDE_MARK}" if outside else "")


def render_scan_table(table: int, rows: list[dict], cells: dict, profile: str, reading: str | None = None,
                      mask_reading: str | None = None, spreads: dict | None = None) -> str:
    """One paper table as Markdown with one number per column: per net (architecture and weight type), the paper's
    EBP-P, ours (mean ± SD over seeds), Δ = ours − paper (OUTSIDE_MARK outside the band of `spreads`, by default
    those of `cells`), then the same for EBP-D. render_table gives the per-cell detail (last-10 means, seeds,
    replays)."""
    spreads = band.family_spreads(finished_errors(cells)) if spreads is None else spreads
    rows = [r for r in rows if r["table"] == table]
    by_cell = {(r["column"], r["row"]): r for r in rows}
    filled = [cells[cell_key(r)] for r in rows if cell_key(r) in cells]
    counts = [len(c.pooled) for c in filled]
    n = max(set(counts), key=counts.count) if counts else 0
    refused = getattr(cells, "rejected", {})
    lines = [f"**{table_title(table, reading, mask_reading)}** — test error %, profile {profile}; ours: mean ± SD "
             f"over {n} seed{'s' if n != 1 else ''} (other counts marked n); {OUTSIDE_MARK}: outside our band.",
             "", "| net | EBP-P paper | ours | Δ | EBP-D paper | ours | Δ |", "|---" * 7 + "|"]
    for column in dict.fromkeys(r["column"] for r in rows):
        for prefix, weights in (("B", "binary"), ("R", "real")):
            entries = []
            for output in ("P", "D"):
                row = by_cell[(column, f"{prefix}-EBP-{output}")]
                cell = cells.get(cell_key(row))
                entries += [f"{row['paper_error']:.2f}", _scan_ours(cell, refused.get(cell_key(row), []), n),
                            _scan_delta(row, cell, spreads)]
            lines.append(f"| {column} {weights} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


def coverage(rows: list[dict], cells: dict, table: int, label: str = "") -> str:
    """One line on a table's runs in `cells`: how many are finished, in progress or not run, and ours − paper
    (percentage points) over its finished cells."""
    table_rows = [r for r in rows if r["table"] == table]
    runs = list(dict.fromkeys(r["run_id"] for r in table_rows))
    state = {run: "not run" for run in runs}
    for r in table_rows:  # a run's EBP-P and EBP-D cells come from the same results
        cell = cells.get(cell_key(r))
        if cell is not None:
            state[r["run_id"]] = ("finished" if cell.finished else
                                  f"{cell.pooled[0]['epochs_done']}/{cell.pooled[0]['parameters']['epochs']} ep")
    refused = {}  # run folder -> (kind, why) of the table's rejected results
    for r in table_rows:
        for _, kind, run_dir, why in getattr(cells, "rejected", {}).get(cell_key(r), []):
            refused[run_dir] = (kind, why)
            if state[r["run_id"]] == "not run":
                state[r["run_id"]] = kind
    finished = [run for run in runs if state[run] == "finished"]
    running = [f"{run} {state[run]}" for run in runs if state[run] not in ("finished", "not run", *REJECTED_KINDS)]
    line = (f"Table {table}{label}: {len(finished)} of {len(runs)} runs finished"
            + (f", in progress: {', '.join(running)}" if running else "")
            + (f", {sum(state[run] == 'not run' for run in runs)} not run"
               if any(state[run] == "not run" for run in runs) else ""))
    # rows of another data set than the paper's have no paper number to compare with
    diffs = [cells[cell_key(r)].mean - r["paper_error"] for r in table_rows
             if cell_key(r) in cells and cells[cell_key(r)].finished and r["paper_error"] is not None]
    if diffs:
        line += (f"; ours − paper over {len(diffs)} cells: mean {sum(diffs) / len(diffs):+.2f}, from "
                 f"{min(diffs):+.2f} to {max(diffs):+.2f} points")
    for run_dir, (kind, why) in sorted(refused.items()):
        line += f"; {run_dir}/{RESULT_FILE} is {kind}, not used: {record_text(why)}"
    return line


def record_text(text: str) -> str:
    """Text that a file on disk supplied (a record's values quoted in why it was refused) as Markdown shows it
    literally: HTML escaped (a record's '<img ...>' must not become markup in tables.md), one line."""
    return " ".join(html.escape(text, quote=False).split())


# ----------------------------------------------------------------------------------------------------------
# The same tables on two data sets: MNIST against Fashion-MNIST (no paper column: the paper ran MNIST only)
# ----------------------------------------------------------------------------------------------------------

DATASET_NAMES = {name: facts["name"] for name, facts in ebp_data.DATASETS.items()}


def _ours_text(cell: Cell | None, refused: list[tuple] = ()) -> str:
    """Our error of one cell, short: 'not run yet', '12.34', '12.34 ± 0.10 (n = 3)', '12.34 · 29/120 ep', or
    'unreadable result.json' (Cells.rejected)."""
    if cell is None:
        return _rejected_text(None, refused) if refused else "not run yet"
    text = f"{cell.mean:.2f}" + ("" if cell.sd is None else f" ± {cell.sd:.2f} (n = {len(cell.pooled)})")
    if not cell.finished:
        text += f" · {cell.pooled[0]['epochs_done']}/{cell.pooled[0]['parameters']['epochs']} ep"
    return text


def render_dataset_table(table: int, rows: list[dict], cells_by_dataset: dict, profile: str,
                         reading: str | None = None, mask_reading: str | None = None) -> str:
    """One paper table as Markdown with our errors on two data sets side by side ({dataset: cells}, e.g. MNIST
    then Fashion-MNIST; table_cells of each) and no paper column: 'first / second (second − first)', the
    difference where both runs are finished; a cell with no run says 'not run yet'. `rows` give the table's
    layout (the cell keys are the same on every data set)."""
    (first, a), (second, b) = cells_by_dataset.items()
    names = [DATASET_NAMES.get(d, d) for d in (first, second)]
    rows = [r for r in rows if r["table"] == table]
    columns = list(dict.fromkeys(r["column"] for r in rows))
    seeds = "; ".join(f"{name}: {seeds_label([c[cell_key(r)] for r in rows if cell_key(r) in c])}"
                      for name, c in zip(names, (a, b)))
    lines = [f"**{table_title(table, reading, mask_reading)}** — profile {profile_label(profile)}; {seeds}. Test "
             f"error % after the last epoch, {names[0]} / {names[1]} ({names[1]} − {names[0]}).",
             "", "| hidden | " + " | ".join(ROW_LABELS) + " |", "|---" * (len(ROW_LABELS) + 1) + "|"]
    keys = {(r["column"], r["row"]): cell_key(r) for r in rows}
    for column in columns:
        entries = []
        for label in ROW_LABELS:
            key = keys[(column, label)]
            one, two = a.get(key), b.get(key)
            text = (f"{_ours_text(one, getattr(a, 'rejected', {}).get(key, []))} / "
                    f"{_ours_text(two, getattr(b, 'rejected', {}).get(key, []))}")
            if one is not None and two is not None and one.finished and two.finished:
                text += f" ({two.mean - one.mean:+.2f})"
            entries.append(text)
        lines.append(f"| {column} | " + " | ".join(entries) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 3 or sys.argv[1] != "upgrade" or any(arg.startswith("-") for arg in sys.argv[2:]):
        sys.exit("usage: python -m reproduction.results upgrade RESULT_JSON...  (rewrites run records of older "
                 "formats as the current one, reproduction.records.RECORD_FORMAT)")
    try:
        upgrade_files(sys.argv[2:])
    except RecordError as error:
        sys.exit(f"error: {error}")
