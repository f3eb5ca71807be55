"""The folder of one run: where it lies, its lock, its result.json, and its state.

A run of the experiment notebook writes into one folder, <runs>/<results_folder(profile, dataset)>/<run_key>/:
result.json (rewritten after every epoch by EpochRecorder), checkpoint.npz while unfinished, the executed
notebook and its learning curve. One process at a time trains into a folder (open_output_dir holds an flock).
Before a run starts, job_state reads what the folder holds and checks result.json (the run record,
reproduction.records) against itself, the checkpoint and the lines its executed notebook printed: a run is new,
partial, finished, stale, corrupt or inconsistent. A finished run is never trained over (check_output_dir, which
the experiment notebook calls too). outputs/README.md describes the files.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import ebp_checkpoint
import ebp_lib
import ebp_train
from reproduction import run_files
from reproduction.parameters import (
    DATASET_CHOICES,
    DEFAULT_PARAMETERS,
    FULL_TRAIN,
    RUN_CONFIG_KEYS,
    RUN_OPTIONS,
    ParameterError,
    RunConfig,
    architecture_layers,
    check_dataset,
    protocol_relative_to_paper,
    same_configuration,
    validate_parameters,
)
from reproduction.records import (
    ALLOW_DIRTY_VAR,
    HISTORY_ERRORS,
    MAX_JSON_BYTES,
    RECORD_FORMAT,
    RENAMED_PARAMETERS,
    REPO,
    Expected,
    JSONFileError,
    NewerRecordError,
    RecordError,
    code_state,
    cpu_model,
    package_versions,
    parse_json,
    read_record,
    record_problems,
    write_record,
)
from reproduction.run_files import (  # noqa: F401  (EBP's callers read the folder's lock and files from here)
    CHECKPOINT_FILE,
    LOCK_FILE,
    PREDICTIONS_FILE,
    RESULT_FILE,
    RunBusyError,
    UnsafeLockError,
    is_locked,
    move_aside,
    open_output_dir,
    read_result,
    save_predictions,
)

RUNS_DIR = REPO / "outputs" / "runs"

EXECUTED_FILE = "experiment.ipynb"
CURVE_FILE = "learning_curve.png"
VERIFICATION_FILE = "verification.json"  # a replay of the run's first epochs (reproduction.verify)
VERIFICATION_FORMAT, VERIFICATION_KIND = 1, "replay"  # what reproduction.verify writes and evidence accepts
# The most a replayed error of an epoch may differ from the recorded one for the replay to agree (reproduction.verify
# states why: 15 of 10,000 test images); equal numbers are "exact".
REPLAY_TOLERANCE = 0.0015


# ----------------------------------------------------------------------------------------------------------
# Where a run's folder lies
# ----------------------------------------------------------------------------------------------------------

def results_folder(profile: str, dataset: str = "mnist") -> str:
    """The folder under outputs/runs/ holding one profile's runs on one data set: the profile's name for MNIST,
    the paper's data set (the committed MNIST runs lie in folders of that name), <profile>-<dataset> for the others,
    e.g. paper-fashion-mnist. One folder per profile and data set, so two data sets never share a run."""
    return profile if check_dataset(dataset) == "mnist" else f"{profile}-{dataset}"


def split_results_folder(name: str) -> tuple[str, str]:
    """(profile, data set) of a folder named by results_folder: 'paper-fashion-mnist' -> ('paper',
    'fashion-mnist'); a name without a data set suffix is an MNIST folder ('paper' -> ('paper', 'mnist'))."""
    for dataset in DATASET_CHOICES:
        if dataset != "mnist" and name.endswith(f"-{dataset}") and len(name) > len(dataset) + 1:
            return name[:-len(dataset) - 1], dataset
    return name, "mnist"


def run_key(run_id: str, dropout: str | None = None, seed: int = 0,
            mask_reading: str = ebp_lib.DEFAULT_MASK_READING, update: str = ebp_lib.DEFAULT_UPDATE) -> str:
    """The folder name of a run: its run id, plus the dropout reading (`dropout`) for dropout runs, plus -held
    for spatial runs with the held mask reading, plus the update where it is not the spec's (e.g.
    -authors), plus -seed<N> for seeds other than 0 (the defaults add nothing: the committed runs of seed 0, the
    absent reading and the spec's update lie in folders named so)."""
    return (run_id + (f"-{dropout}" if dropout else "")
            + (f"-{mask_reading}" if mask_reading != ebp_lib.DEFAULT_MASK_READING else "")
            + (f"-{update}" if update != ebp_lib.DEFAULT_UPDATE else "") + (f"-seed{seed}" if seed else ""))


def expected_run_folder(params: dict) -> str:
    """The folder name (run_key) of a run of the experiment parameters `params`: its run id (<weights>-<architecture>,
    -dropout for dropout runs, as reproduction.paper_tables names them) and its variants."""
    run_id = f"{params['weights']}-{params['architecture']}" + ("-dropout" if params["dropout"] else "")
    return run_key(run_id, params["dropout"], params["seed"], params["mask_reading"], params["update"])


# ----------------------------------------------------------------------------------------------------------
# What the folder holds: result.json (the run record), the checkpoint and the executed notebook
# ----------------------------------------------------------------------------------------------------------

def epochs_in_checkpoint(checkpoint) -> int:
    """How many epochs a checkpoint of ebp_train.fit holds (0 if there is none); CheckpointError if unreadable."""
    if not Path(checkpoint).exists():
        return 0
    return len(ebp_checkpoint.read_network_meta(checkpoint)["history"])


class EpochRecorder:
    """The on_epoch callback of ebp_train.fit: prints a progress line and rewrites result.json after every epoch
    (finished: false), so the runner can show progress and an interrupted run still has its learning curve."""

    def __init__(self, output_dir, config: RunConfig, checkpoint, engine: str | None = None, echo=print):
        self.path, self.params, self.echo = Path(output_dir), config.parameters(), echo
        self.engine = engine or ebp_train.DEFAULT_ENGINE
        self.history = ebp_checkpoint.read_network_meta(checkpoint)["history"] if Path(checkpoint).exists() else []
        self.start_epoch, self.started = len(self.history), time.time()
        previous = read_result(self.path) if self.start_epoch else None  # only a resumed run continues it
        self.sessions = list(previous["sessions"]) if previous else []
        # A run of the paper's protocol, or a longer one, is quoted: refuse (DirtyTreeError) to start it from code
        # that differs from its commit, unless $EBP_ALLOW_DIRTY is 1; the session then lists the changed files.
        allow = protocol_relative_to_paper(self.params) == "shortened" or os.environ.get(ALLOW_DIRTY_VAR) == "1"
        code = {k: v for k, v in code_state(allow).items() if k != "allowed_dirty"}
        self.session = {"started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        "host": socket.gethostname(), "cpu": cpu_model(), "from_epoch": self.start_epoch,
                        **code, "versions": package_versions()}

    def __call__(self, record: dict) -> None:
        self.history.append(record)
        e = record["epoch"]
        self.echo(f"epoch {e}/{self.params['epochs']}: test error EBP-P {100 * record['test_ebp_p']:.2f}%, "
                  f"EBP-D {100 * record['test_ebp_d']:.2f}% (epoch took {record['train_seconds']:.1f} s)")
        self.write(self.history, finished=False)

    def write(self, history: list[dict], finished: bool) -> dict:
        """Write result.json for `history` (records.write_record) and return its contents."""
        wall = time.time() - self.started
        session = {**self.session, "to_epoch": len(history), "wall_seconds": round(wall, 2),
                   "seconds_per_epoch": round(wall / max(1, len(history) - self.start_epoch), 2)}
        n_images = self.params["n_train"] or FULL_TRAIN
        last = history[-1] if history else None
        result = {
            "format": RECORD_FORMAT,
            "method": "ebp",
            "parameters": self.params,
            "protocol": protocol_relative_to_paper(self.params),
            "finished": bool(finished and len(history) >= self.params["epochs"]),
            "epochs_done": len(history),
            "n_train_images": n_images,
            "train_error_images": min(n_images, 10000),  # fit's default n_train_eval
            "final": None if last is None else {k: last[k] for k in HISTORY_ERRORS["ebp"]},
            "history": history,
            "train_seconds": round(sum(r["train_seconds"] for r in history), 2),
            "wall_seconds": round(sum(s["wall_seconds"] for s in self.sessions) + wall, 2),
            "engine": self.engine,
            "versions": package_versions(),
            "git_commit": self.session["git_commit"],
            "git_dirty": self.session["git_dirty"],
            "sessions": self.sessions + [session],
        }
        write_record(self.path / RESULT_FILE, result)
        return result


def ebp_expected(data: dict) -> Expected | list[str]:
    """What an EBP run record's parameters give (records.record_problems checks the record against it): the
    complete, valid set (validate_parameters), or the problems that stop the check; the protocol, training images
    and training-error images they give; the final errors of its last epoch; exactly its planned epochs if finished."""
    try:
        valid = validate_parameters(data["parameters"])
    except ParameterError as err:
        return [f"parameters: {err}"]
    n_images = valid["n_train"] or FULL_TRAIN
    last = data["history"][-1] if data["history"] else None
    derived = {"protocol": protocol_relative_to_paper(valid), "n_train_images": n_images,
               "train_error_images": min(n_images, 10000)}
    final = None if last is None else {k: last.get(k) for k in HISTORY_ERRORS["ebp"]}
    return Expected(valid, derived, final, "last epoch", valid["epochs"], may_stop_early=False)



def checkpoint_meta(checkpoint) -> dict:
    """The metadata of a checkpoint (ebp_checkpoint.read_network_meta) once all of it has been read: a flipped byte in
    the weights fails their CRC only when they are read. CheckpointError, naming the file, if unreadable."""
    ebp_lib.load_network(checkpoint)
    return ebp_checkpoint.read_network_meta(checkpoint)


def checkpoint_settings(meta: dict) -> dict:
    """The experiment parameters a checkpoint was trained with, from its metadata (ebp_checkpoint.read_network_meta):
    the network's layers, weights, dropout, keep and mask reading (the network records the reading only when it
    is not the default, absent), and the run configuration, seed and batch size that ebp_train.fit stores as `run` (a
    network saved by other means has none)."""
    network = meta["config"]
    settings = {"layers": network["architecture"], "weights": network["weights"], "dropout": network["dropout"],
                "keep": network["keep"], "mask_reading": network.get("mask_reading", ebp_lib.DEFAULT_MASK_READING),
                "update": network.get("real_update", ebp_lib.DEFAULT_UPDATE)}
    run = meta.get("run", {})
    settings.update({k: v for k, v in run.items() if k in RUN_CONFIG_KEYS or k in ("seed", "batch_size")})
    return settings


def _as_json(value):
    """`value` as JSON would give it back (tuples as lists): how a checkpoint's metadata holds it."""
    return json.loads(json.dumps(value))


def parameter_problems(settings: dict, params: dict, source: str, where) -> list[str]:
    """The checkpoint `where`'s `settings` (checkpoint_settings) that differ from the parameters `params` of
    `source` (a file or 'these parameters'), each naming the field and both values."""
    wanted = {**params, "layers": _as_json(architecture_layers(params["architecture"]))}
    return [f"parameters.{name}: {where} {value!r}, {source} {wanted[name]!r}"
            for name, value in settings.items() if name in wanted and wanted[name] != value]


def checkpoint_problems(result: dict, meta: dict, result_path, checkpoint) -> list[str]:
    """Whatever a run record (`result_path`) and its checkpoint's metadata disagree on: every parameter the
    checkpoint records, and every field of every epoch of the history (the four errors and the time), from which
    final, epochs_done and finished follow (record_problems holds them to the history)."""
    problems = parameter_problems(checkpoint_settings(meta), result["parameters"], result_path, checkpoint)
    saved, history, done = meta["history"], result["history"], result["epochs_done"]
    # fit saves the checkpoint just before on_epoch rewrites result.json: a run killed between the two has a
    # checkpoint one epoch ahead; a finished result and a checkpoint left beside it hold the same epochs
    allowed = (done,) if result["finished"] else (done, done + 1)
    if len(saved) not in allowed:
        problems.append(f"epochs_done: {result_path} {'finished after ' if result['finished'] else ''}{done}, "
                        f"{checkpoint} holds {len(saved)} epochs")
    for i, (ours, theirs) in enumerate(zip(history, saved)):
        for key in sorted(set(ours) | set(theirs)):
            if ours.get(key) != theirs.get(key):
                problems.append(f"history[{i}].{key} (epoch {i + 1}): {result_path} {ours.get(key)!r}, "
                                f"{checkpoint} {theirs.get(key)!r}")
    return problems


# The lines an executed experiment notebook prints at its end (its last cells), the record of what actually ran:
# "final test error after 120 epochs on 60,000 images: EBP-P 3.24%, EBP-D 4.32% (protocol: paper, finished: True)",
# and the table of errors after every epoch, "epoch  test EBP-P  test EBP-D  train EBP-P  train EBP-D" and a row
# per epoch.
FINAL_LINE = re.compile(r"final test error after (?P<epochs>\d+) epochs on (?P<images>[\d,]+) images: "
                        r"EBP-P (?P<p>[\d.]+)%, EBP-D (?P<d>[\d.]+)% \(protocol: (?P<protocol>[\w-]+), "
                        r"finished: (?P<finished>True|False)\)")
TABLE_HEADER = re.compile(r"^\s*epoch\s+test EBP-P\s+test EBP-D\s+train EBP-P\s+train EBP-D\s*$")


def printed_lines(notebook: dict) -> list[str]:
    """Every line the code cells of an executed notebook (nbformat JSON) printed to stdout, in order."""
    lines = []
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    for cell in cells if isinstance(cells, list) else []:
        outputs = cell.get("outputs") if isinstance(cell, dict) and cell.get("cell_type") == "code" else None
        for output in outputs if isinstance(outputs, list) else []:
            if isinstance(output, dict) and output.get("output_type") == "stream" and output.get("name") == "stdout":
                text = output.get("text", "")
                lines += ("".join(text) if isinstance(text, list) else str(text)).splitlines()
    return lines


def percent(value) -> str:
    """An error rate as the experiment notebook prints it: 0.0324 -> '3.24'."""
    return "nan" if value is None else f"{100 * value:.2f}"


def notebook_problems(result: dict, notebook: dict, result_path, notebook_path) -> list[str]:
    """Whatever a finished run record (`result_path`) and its executed notebook (`notebook_path`, parsed) disagree
    on: the final line it printed (epochs, training images, both final test errors, protocol), its table of errors
    after every epoch (all four, to the two decimals printed), the parameters papermill gave it, and the engine
    if papermill gave one (a run option, RUN_OPTIONS). Each problem names the field and both files."""
    lines = printed_lines(notebook)
    finals = [m for m in map(FINAL_LINE.search, lines) if m]
    if not finals:
        return [f"final: {notebook_path} printed no final line ('final test error after ...'): the notebook did "
                f"not finish this run"]
    m, final = finals[-1], result["final"] or {}
    printed = {"epochs_done": (m["epochs"], str(result["epochs_done"])),
               "n_train_images": (m["images"].replace(",", ""), str(result["n_train_images"])),
               "final.test_ebp_p": (m["p"], percent(final.get("test_ebp_p"))),
               "final.test_ebp_d": (m["d"], percent(final.get("test_ebp_d"))),
               "protocol": (m["protocol"], result["protocol"]),
               "finished": (m["finished"] == "True", result["finished"])}
    problems = [f"{name}: {result_path} {ours!r}, {notebook_path} printed {theirs!r}"
                for name, (theirs, ours) in printed.items() if theirs != ours]
    header = next((i for i, line in enumerate(lines) if TABLE_HEADER.match(line)), None)
    if header is not None:
        rows = [line.split() for line in lines[header + 1:header + 1 + len(result["history"]) + 1]]
        rows = [row for row in rows if len(row) == 5 and row[0].isdigit()]
        if len(rows) != len(result["history"]):
            problems.append(f"history: {result_path} holds {len(result['history'])} epochs, {notebook_path} "
                            f"printed {len(rows)}")
        for i, (entry, row) in enumerate(zip(result["history"], rows)):
            for key, text in zip(("epoch",) + HISTORY_ERRORS["ebp"], row):
                ours = str(entry["epoch"]) if key == "epoch" else percent(entry[key])
                if ours != text:
                    problems.append(f"history[{i}].{key} (epoch {i + 1}): {result_path} {ours}, {notebook_path} "
                                    f"printed {text}")
    given = notebook.get("metadata", {}).get("papermill", {}).get("parameters") or {}
    options = {k: v for k, v in given.items() if k in RUN_OPTIONS}  # how it ran, not what: checked apart
    # a notebook run before a parameter's rename was given it under its earlier name (records.RENAMED_PARAMETERS)
    given = {RENAMED_PARAMETERS.get(k, k): v for k, v in given.items() if k != "output_dir" and k not in RUN_OPTIONS}
    if "engine" in options and options["engine"] != result["engine"]:
        problems.append(f"engine: {result_path} {result['engine']!r}, {notebook_path} ran with "
                        f"{options['engine']!r}")
    try:
        ran = validate_parameters({**result["parameters"], **given})
    except ParameterError as err:
        return problems + [f"parameters: {notebook_path} was given invalid parameters ({err})"]
    problems += [f"parameters.{k}: {result_path} {result['parameters'][k]!r}, {notebook_path} ran with {ran[k]!r}"
                 for k in given if ran[k] != result["parameters"][k]]
    return problems


# ----------------------------------------------------------------------------------------------------------
# A finished run is never trained over: the check the runner and the experiment notebook share
# ----------------------------------------------------------------------------------------------------------

class FinishedRunError(RuntimeError):
    """The output folder holds a finished run: of other parameters (training would replace it), or of these
    (there is nothing to do)."""


def differences(saved: dict, wanted: dict, names=tuple(n for n in DEFAULT_PARAMETERS if n != "output_dir")) -> str:
    """run_files.differences over an experiment's parameters by default (the output folder aside)."""
    return run_files.differences(saved, wanted, names)


def finished_run(out, result: dict | None, config: RunConfig) -> tuple[str, str] | None:
    """What a folder `out` holding the run record `result` means for a run of `config`: None if it holds no
    finished run; ('finished', why) if a finished run of these parameters (nothing to do); ('stale', why) if a
    finished run of other parameters, which training would replace (refused, naming the differing parameters)."""
    if result is None or not result["finished"]:
        return None
    params = config.parameters()
    if same_configuration(result["parameters"], params):
        final = result["final"]
        return "finished", (f"{out} already holds this run, finished after {result['epochs_done']} epochs (EBP-P "
                            f"{percent(final['test_ebp_p'])}%, EBP-D {percent(final['test_ebp_d'])}%): nothing "
                            f"to do; move that folder away to train the run again")
    return "stale", (f"{out} holds a finished run of other parameters ({differences(result['parameters'], params)}"
                     f"); refusing to train over it: choose another output folder, or move that one away")


def check_output_dir(out, config: RunConfig) -> None:
    """Refuse, before any work, to train `config` into folder `out` when it holds a finished run (finished_run):
    FinishedRunError naming the folder and the parameters that differ, or saying there is nothing to do. An
    unreadable result.json is refused too (RecordError naming it). When the finished run's executed notebook no
    longer vouches for it (papermill writes its output notebook before the first cell runs, so a call writing
    over the run's notebook has destroyed it by now), the refusal says so and how to restore it. The experiment
    notebook calls this after locking its folder; the runner reaches the same verdict through job_state."""
    try:
        result = read_record(Path(out) / RESULT_FILE)
    except FileNotFoundError:
        return
    verdict = finished_run(out, result, config)
    if verdict is None:
        return
    kind, problems = evidence_problems(result, read_bytes(Path(out) / RESULT_FILE),
                                       read_bytes(Path(out) / EXECUTED_FILE),
                                       read_bytes(Path(out) / VERIFICATION_FILE), out)
    if problems:  # papermill writes its output notebook before this cell runs: over the run's, if told to
        raise FinishedRunError(f"{verdict[1]}. WARNING: its executed notebook {Path(out) / EXECUTED_FILE} no longer "
                               f"vouches for it ({kind}: {problems[0]}); if papermill was told to write its output "
                               f"there, it has just replaced the finished run's notebook: "
                               f"{restore_hint(out, EXECUTED_FILE)}")
    raise FinishedRunError(verdict[1])


@dataclass
class RunState:
    """What a run's folder holds: state is new, partial, finished, stale (a finished run of other parameters,
    left alone), corrupt (an unreadable checkpoint or result.json: `files`), inconsistent (result.json disagrees
    with itself, its checkpoint or its executed notebook: `problems`, each naming its field, and `files`),
    unverified (a finished result.json without its evidence: evidence_problems) or newer (a record or checkpoint
    format newer than this code: left alone); epochs done."""
    state: str
    epochs: int = 0
    problems: list = field(default_factory=list)
    files: list = field(default_factory=list)


def sha256(data: bytes) -> str:
    """The SHA-256 digest of `data`, in hex: how a record names the exact executed notebook that vouches for it."""
    return hashlib.sha256(data).hexdigest()


def restore_hint(out, *names) -> str:
    """How to get back what a run folder `out` had committed (git), or to vouch for its record by replaying it."""
    paths = " ".join(str(Path(out) / name) for name in names)
    return (f"restore the committed version (git restore --source=HEAD -- {paths}), or replay the run's first "
            f"epochs to vouch for its record (python -m reproduction.verify {out})")


def first_epochs_commits(result: dict, k: int) -> set:
    """The commits that trained the first `k` epochs of a run record: those of its sessions that started before
    epoch k (None for a session that named none), or its git_commit where no session did."""
    return {s.get("git_commit") for s in result["sessions"] if s["from_epoch"] < k} or {result["git_commit"]}


def _replay_entry_problems(entry, recorded: dict, epoch: int, tolerance: float) -> list[str]:
    """Why one epoch of a verification's history (`entry`) does not vouch for the record's epoch `recorded`: not
    its epoch, its recorded errors not the record's, its replayed ones missing or further than `tolerance`."""
    keys = HISTORY_ERRORS["ebp"]
    if not isinstance(entry, dict) or entry.get("epoch") != epoch:
        return [f"history[{epoch - 1}] is not epoch {epoch}"]
    theirs, replayed = entry.get("recorded"), entry.get("replayed")
    if not isinstance(theirs, dict) or any(theirs.get(key) != recorded[key] for key in keys):
        return [f"history[{epoch - 1}].recorded is not what {RESULT_FILE} holds for epoch {epoch}: it verified "
                f"another history"]
    if not isinstance(replayed, dict) or not all(type(replayed.get(key)) in (int, float) for key in keys):
        return [f"history[{epoch - 1}].replayed does not hold the four errors"]
    worst = max(abs(replayed[key] - recorded[key]) for key in keys)
    if worst > tolerance + 1e-12:
        return [f"epoch {epoch}: its replay differs by {worst:.4f}, more than the tolerance {tolerance}"]
    return []


def verification_problems(result: dict, result_text: bytes, verification: bytes | None, where) -> list[str]:
    """Why the verification record `verification` (the bytes of VERIFICATION_FILE at `where`, None if there is
    none) does not vouch for the first epochs of the run record `result`, whose exact bytes are `result_text`:
    none, unreadable, not of this format and kind, about another record (its result_sha256), another commit than the
    one that trained those epochs, not 1..epochs_done epochs, a recorded history not the record's, or a replay
    further than REPLAY_TOLERANCE from it (its numbers are judged, not its verdict). Empty if it vouches for them."""
    if verification is None:
        return [f"{VERIFICATION_FILE}: there is none"]
    try:
        data = parse_json(verification, where)
    except JSONFileError as err:
        return [f"{VERIFICATION_FILE}: {err}"]
    if not isinstance(data, dict) or data.get("format") != VERIFICATION_FORMAT or data.get("kind") != VERIFICATION_KIND:
        return [f"{VERIFICATION_FILE}: not a verification record (format {VERIFICATION_FORMAT}, kind "
                f"{VERIFICATION_KIND!r}, as python -m reproduction.verify writes)"]
    if data.get("result_sha256") != sha256(result_text):
        return [f"{VERIFICATION_FILE}: it verified another {RESULT_FILE} (its result_sha256 is not this file's "
                f"digest): the record changed since it was replayed"]
    k, tolerance, history = data.get("epochs"), data.get("tolerance"), data.get("history")
    if type(k) is not int or not 1 <= k <= result["epochs_done"]:
        return [f"{VERIFICATION_FILE}: epochs {k!r:.40} is not a count of the record's {result['epochs_done']} epochs"]
    if first_epochs_commits(result, k) != {data.get("commit")}:
        return [f"{VERIFICATION_FILE}: it replayed commit {data.get('commit')!r:.60}, not the one that trained the "
                f"first {k} epochs ({', '.join(sorted(map(str, first_epochs_commits(result, k))))})"]
    if type(tolerance) not in (int, float) or not 0 <= tolerance <= REPLAY_TOLERANCE:
        return [f"{VERIFICATION_FILE}: tolerance {tolerance!r:.40} is not within [0, {REPLAY_TOLERANCE}]"]
    if not isinstance(history, list) or len(history) != k:
        return [f"{VERIFICATION_FILE}: its history does not hold the {k} epochs it replayed"]
    problems = [p for i, entry in enumerate(history)
                for p in _replay_entry_problems(entry, result["history"][i], i + 1, tolerance)]
    if problems:
        return [f"{VERIFICATION_FILE}: {problems[0]}"]
    if data.get("verdict") not in ("exact", "agrees"):
        return [f"{VERIFICATION_FILE}: its replay {data.get('verdict', 'gave no verdict')!r:.40}"]
    return []


def replay_covers(verification: bytes | None, where) -> int:
    """How many epochs a verification record (already vouching: verification_problems) says it replayed."""
    return parse_json(verification, where)["epochs"]


def evidence_problems(result: dict, result_text: bytes, notebook: bytes | None, verification: bytes | None,
                      out) -> tuple[str, list[str]]:
    """Whether a finished EBP run record (`result`, whose exact bytes are `result_text`) in folder `out` has its
    evidence: its executed notebook (`notebook`, bytes; None if missing), the one it records (notebook_sha256)
    and printing what the record holds (notebook_problems), or else a verification record that vouches for it
    (`verification`, verification_problems). Returns (kind, problems): ('notebook' or 'replayed', []) when it has;
    ('inconsistent', ...) when the notebook disagrees, was replaced or cannot be read; ('unverified', ...) when
    there is neither. Each problem names the file, and says how to restore it or re-verify the record."""
    where, vouched = Path(out) / EXECUTED_FILE, Path(out) / VERIFICATION_FILE
    replayed = not verification_problems(result, result_text, verification, vouched)
    if notebook is None:
        covered = replay_covers(verification, vouched) if replayed else 0
        if replayed and covered == result["epochs_done"]:
            return "replayed", []
        recorded = " (result.json records its digest)" if result.get("notebook_sha256") else ""
        why = (f"its {VERIFICATION_FILE} vouches for epochs 1-{covered} only, not for the {result['epochs_done']} "
               f"the record reports (replay them all: python -m reproduction.verify {out} --epochs "
               f"{result['epochs_done']})" if replayed else f"no {VERIFICATION_FILE} vouches for {RESULT_FILE}")
        return "unverified", [f"{EXECUTED_FILE}: the executed notebook, the evidence of this finished run, is "
                              f"missing{recorded}, and {why}: it is not published; {restore_hint(out, EXECUTED_FILE)}"]
    digest = result.get("notebook_sha256")
    if digest is not None and digest != sha256(notebook):
        return "inconsistent", [f"{EXECUTED_FILE}: replaced after the run finished (its digest is not the "
                                f"notebook_sha256 {RESULT_FILE} records); {restore_hint(out, EXECUTED_FILE)}"]
    try:
        parsed = parse_json(notebook, where)
    except JSONFileError as err:
        return "inconsistent", [f"{EXECUTED_FILE}: {err}; {restore_hint(out, EXECUTED_FILE)}"]
    problems = notebook_problems(result, parsed if isinstance(parsed, dict) else {}, RESULT_FILE, EXECUTED_FILE)
    if problems:
        return "inconsistent", problems + [f"to repair: {restore_hint(out, EXECUTED_FILE, RESULT_FILE)}"]
    return ("replayed" if replayed else "notebook"), []


def read_bytes(path) -> bytes | None:
    """The bytes of file `path` (at most records.MAX_JSON_BYTES + 1 of them), None if there is none."""
    try:
        with open(path, "rb") as f:
            return f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        return None


def job_state(job) -> RunState:
    """The state of a job's output folder (a reproduction.job.Job: its output_dir, for its config; reads
    result.json, the whole checkpoint and the executed notebook, never writes). A finished result is checked
    against the checkpoint beside it, if any, and must have its evidence (evidence_problems): the executed notebook
    that printed what it holds, or a replay that vouches for it; any disagreement makes the run inconsistent, no
    evidence unverified, never finished. A record of a newer format than this code reads is `newer`, left alone."""
    out = job.output_dir
    result_path, checkpoint, executed = out / RESULT_FILE, out / CHECKPOINT_FILE, out / EXECUTED_FILE
    result = meta = None
    corrupt = []
    try:
        result = read_record(result_path)
    except FileNotFoundError:
        pass
    except NewerRecordError as err:
        return RunState("newer", 0, [str(err)], [result_path])
    except RecordError as err:
        corrupt.append((result_path, str(err)))
    if checkpoint.exists():
        try:
            meta = checkpoint_meta(checkpoint)
        except ebp_checkpoint.NewerCheckpointError as err:  # hours of training: never moved aside as corrupt
            return RunState("newer", 0, [str(err)], [checkpoint])
        except ebp_checkpoint.CheckpointError as err:
            corrupt.append((checkpoint, str(err)))
    if corrupt:
        return RunState("corrupt", 0, [why for _, why in corrupt], [path for path, _ in corrupt])
    # each problem names its field and the files by name (RESULT_FILE, ...); RunState.files gives their paths
    problems, files = [], set()
    if result is not None:
        own = [f"{RESULT_FILE}: {problem}" for problem in record_problems(result)]
        problems += own
        files |= {result_path} if own else set()
    if meta is not None:
        mine = parameter_problems(checkpoint_settings(meta), job.config.parameters(), "these parameters",
                                  CHECKPOINT_FILE)
        if result is not None and not problems:  # a record at odds with itself is compared no further
            mine += checkpoint_problems(result, meta, RESULT_FILE, CHECKPOINT_FILE)
        problems += mine
        files |= {checkpoint, *([result_path] if result is not None else [])} if mine else set()
    if result is not None and result["finished"] and not problems:
        kind, theirs = evidence_problems(result, read_bytes(result_path), read_bytes(executed),
                                         read_bytes(out / VERIFICATION_FILE), out)
        if kind == "unverified":
            return RunState("unverified", 0, theirs, [result_path])
        problems += theirs
        files |= {result_path, executed} if theirs else set()
    if problems:
        return RunState("inconsistent", 0, problems, sorted(files, key=[result_path, checkpoint, executed].index))
    verdict = finished_run(out, result, job.config)
    if verdict is not None:
        state, why = verdict
        return RunState(state, result["epochs_done"], [] if state == "finished" else [why],
                        [] if state == "finished" else [result_path])
    if meta is not None:
        return RunState("partial", len(meta["history"]))
    return RunState("new")


def remove_temporaries(out) -> list[Path]:
    """Delete what an interrupted writer left in a run's folder (call it holding the folder's lock): the
    temporaries of write_atomically, ebp_lib.save_network and run_job's notebook."""
    out = Path(out)
    leftovers = [p for pattern in (".*.tmp", ebp_checkpoint.temporary_name(CHECKPOINT_FILE, "*"),
                                   f"{CHECKPOINT_FILE}.tmp.npz", ".experiment-*.tmp.ipynb")
                 for p in out.glob(pattern)]
    for path in leftovers:
        path.unlink(missing_ok=True)
    return leftovers
