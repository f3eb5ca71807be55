"""The convolutional EBP runs beside the paper's dense (Table 2) and locally connected (Table 4) runs: test errors,
learning curves, paired differences by seed, and one generated sentence (notebooks/11_convolutional_ebp.ipynb, §7).

CNN runs are the EBP records of the named profiles (outputs/runs/named-e<epochs>[...]/, scripts/run_architecture.py)
whose architecture starts with a convolution; the comparators are the paper profile's runs (outputs/runs/paper/,
the paper's 120 epochs) of the same data set and weight type without dropout, with the default mask reading and
update: dense nets (Table 2) and locally connected nets (Table 4). A CNN run and a comparator are paired when they
share a seed; a pair's difference is CNN − comparator of the last recorded test error of each (the CNN's after the
epochs it has done, the comparator's after its own), in percentage points. Against the successors on the same CNN
and test images, a run that keeps its per-image predictions is also compared image by image (image_pairs).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import ebp_conv_catalogue as catalogue
import ebp_data
from ebp_lib import DEFAULT_MASK_READING, DEFAULT_UPDATE
from reproduction.architectures import architecture_layers, family
from reproduction.parameters import NOT_LEARNING

OUTPUTS = ("test_ebp_p", "test_ebp_d")
COMPARATOR_PROFILE = "paper"


@dataclass
class Group:
    """The runs of one network and setting, one per seed: key (dataset, weights, architecture, scheme, profile),
    runs {seed: record}."""
    key: tuple
    runs: dict

    @property
    def label(self) -> str:
        dataset, weights, architecture, scheme, profile = self.key
        name = catalogue.catalogue_name(architecture)
        return (f"{weights} {architecture}" + (f" ({name})" if name else "") + f", {dataset}"
                + (f", init {scheme}" if scheme != catalogue.DEFAULT_SCHEME else "") + f" [{profile}]")

    @property
    def finished(self) -> bool:
        return all(r["finished"] for r in self.runs.values())

    def epochs_done(self) -> list[int]:
        return [self.runs[s]["epochs_done"] for s in sorted(self.runs)]

    def errors(self, output: str) -> list[float]:
        """The last recorded test error of every seed, in seed order."""
        return [self.runs[s]["final"][output] for s in sorted(self.runs)]

    def curve(self, output: str) -> list[tuple[int, float, float, int]]:
        """(epoch, mean, SD, seeds) of the test error over the seeds that recorded each epoch."""
        by_epoch = {}
        for record in self.runs.values():
            for row in record["history"]:
                by_epoch.setdefault(row["epoch"], []).append(row[output])
        return [(e, statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0, len(v))
                for e, v in sorted(by_epoch.items())]


def is_cnn(architecture: str) -> bool:
    return family(architecture) == "conv"


def _group(records) -> list[Group]:
    groups = {}
    for r in records:
        p = r["parameters"]
        key = (p["dataset"], p["weights"], p["architecture"],
               catalogue.scheme_of(p["init_scale"], architecture_layers(p["architecture"])), r["profile"])
        groups.setdefault(key, {})[p["seed"]] = r
    return [Group(key, runs) for key, runs in sorted(groups.items())]


def cnn_groups(results) -> list[Group]:
    """The CNN runs of the named profiles (module docstring), grouped over seeds."""
    return _group(r for r in results if r["method"] == "ebp" and r["profile"].startswith("named-e")
                  and is_cnn(r["parameters"]["architecture"]))


def comparator_groups(results, dataset: str, weights: str) -> dict[str, list[Group]]:
    """{"dense": Table 2's groups, "local": Table 4's} of the paper profile for a data set and weight type."""
    plain = [r for r in results if r["method"] == "ebp" and r["profile"] == COMPARATOR_PROFILE
             and r["parameters"]["dataset"] == dataset and r["parameters"]["weights"] == weights
             and not r["parameters"]["dropout"] and r["parameters"]["mask_reading"] == DEFAULT_MASK_READING
             and r["parameters"]["update"] == DEFAULT_UPDATE
             and r["parameters"]["init_scale"] == 1.0 and not is_cnn(r["parameters"]["architecture"])]
    groups = _group(plain)
    return {kind: [g for g in groups if family(g.key[2]) == kind] for kind in ("dense", "local")}


def paired(cnn: Group, other: Group, output: str) -> tuple[float, float | None, int] | None:
    """(mean, SD, pairs) of CNN − comparator over their shared seeds, in percentage points (SD None for one pair:
    one seed has no spread); None if none shared."""
    seeds = sorted(set(cnn.runs) & set(other.runs))
    if not seeds:
        return None
    d = [100 * (cnn.runs[s]["final"][output] - other.runs[s]["final"][output]) for s in seeds]
    return statistics.fmean(d), statistics.stdev(d) if len(d) > 1 else None, len(d)


def size_spread(d: tuple[float, float | None, int]) -> str:
    """"|mean| ± SD" of a paired difference, "|mean|" alone for one pair."""
    return f"{abs(d[0]):.2f} ± {d[1]:.2f}" if d[1] is not None else f"{abs(d[0]):.2f}"


def mean_sd(values: list[float]) -> str:
    """"a ± s" in percent (SD over seeds; one seed: its value alone)."""
    pct = [100 * v for v in values]
    if len(pct) == 1:
        return f"{pct[0]:.2f}"
    return f"{statistics.fmean(pct):.2f} ± {statistics.stdev(pct):.2f}"


def table_rows(results) -> list[dict]:
    """One row per CNN group and one per comparator of its data set and weights: errors (mean ± SD, %), seeds,
    epochs done, finished, and for comparators the paired difference CNN − comparator of EBP-D (points)."""
    rows = []
    for cnn in cnn_groups(results):
        rows.append(_row(cnn, "CNN", None))
        for kind, groups in comparator_groups(results, cnn.key[0], cnn.key[1]).items():
            rows.extend(_row(g, "dense (Table 2)" if kind == "dense" else "local (Table 4)", cnn) for g in groups)
    return rows


def _row(g: Group, kind: str, cnn: Group | None) -> dict:
    row = {"network": g.label if cnn is None else f"  {g.key[1]} {g.key[2]} [{g.key[4]}]", "kind": kind,
           "seeds": ",".join(map(str, sorted(g.runs))), "epochs": "/".join(map(str, g.epochs_done())),
           "finished": g.finished}
    row.update({o: mean_sd(g.errors(o)) for o in OUTPUTS})
    if cnn is not None:
        for output in OUTPUTS:
            d = paired(cnn, g, output)
            row[f"CNN − this, {_name(output)} (points)"] = ("no shared seed" if d is None else
                                                            f"{d[0]:+.2f}" + (f" ± {d[1]:.2f}" if d[1] is not None else "")
                                                            + f" ({d[2]})")
    return row


def best(groups: list[Group], output: str) -> Group | None:
    """The group of the lowest mean error among those of the most seeds: the lowest of means over unequal numbers
    of seeds would favour the noisier, one-seed cells."""
    most = max((len(g.runs) for g in groups), default=0)
    return min((g for g in groups if len(g.runs) == most), key=lambda g: statistics.fmean(g.errors(output)),
               default=None)


def verdict(results) -> str:
    """One sentence: whether EBP trains the CNNs, and by how much their EBP-P and EBP-D test errors differ from
    the best dense and the best locally connected net of each output (paired by seed); honest when no CNN run is
    finished."""
    groups = cnn_groups(results)
    if not groups:
        return "No CNN run recorded yet: whether EBP works on CNNs is not measured."
    finished = [g for g in groups if g.finished]
    if not finished:
        g = max(groups, key=lambda g: min(g.epochs_done()))
        return (f"No CNN run finished yet: after {min(g.epochs_done())} of {g.runs[min(g.runs)]['parameters']['epochs']} "
                f"epochs {g.label} has EBP-P {mean_sd(g.errors('test_ebp_p'))}% and EBP-D "
                f"{mean_sd(g.errors('test_ebp_d'))}% test error ({len(g.runs)} seeds) — a run in progress, "
                f"not a verdict.")
    return "; ".join(_finished_clause(g, results) for g in finished) + "."


def headline(results) -> str:
    """The front page's sentences on EBP for CNNs, in sentences of at most about 30 words: per data set, the finished
    binary CNN group of the lowest EBP-P error, its EBP-P and EBP-D each beside the best dense net of the same data
    set (paired by seed); what is still running where no group is finished. The front page has room for the
    paper's subject, binary weights, and one net per data set: the rest is in notebook 11's §8 (verdict)."""
    finished = [g for g in cnn_groups(results) if g.finished and g.key[1] == "binary"]
    if not finished:
        return "**Beyond the paper.** " + verdict(results)
    by_dataset: dict = {}
    for g in finished:
        by_dataset.setdefault(g.key[0], []).append(g)
    sentences = []
    for g in (best(groups, "test_ebp_p") for _, groups in sorted(by_dataset.items())):
        dataset, weights, architecture = g.key[:3]
        name = catalogue.catalogue_name(architecture)
        net = f"{name} ({architecture})" if name else architecture
        learns = max(statistics.fmean(g.errors(o)) for o in OUTPUTS) < NOT_LEARNING
        sentences.append(f"On {ebp_data.DATASETS[dataset]['name']}, EBP {'trains' if learns else 'does not train'} "
                         f"the {weights} {net} to EBP-P {mean_sd(g.errors('test_ebp_p'))}% after "
                         f"{g.epochs_done()[0]} epochs ({len(g.runs)} seeds; not the paper's protocol).")
        dense = comparator_groups(results, dataset, weights)["dense"]
        for output, lead in (("test_ebp_p", "That is"), ("test_ebp_d", "Its deployed ±1 net (EBP-D) errs "
                                                          f"{mean_sd(g.errors('test_ebp_d'))}%,")):
            other = best(dense, output)
            d = paired(g, other, output) if other else None
            if d is not None:
                sentences.append(f"{lead} {size_spread(d)} points {'above' if d[0] > 0 else 'below'} "
                                 f"the best dense net's, [{other.key[2].replace('-', ',')}] after "
                                 f"{other.epochs_done()[0]} epochs, "
                                 f"{'paired by seed' if d[2] > 1 else 'one seed paired: no spread'}.")
    return "**Beyond the paper.** The paper left convolutional nets to future work. " + " ".join(sentences)


def _finished_clause(g: Group, results) -> str:
    """A finished CNN group's errors, and its paired differences from the best comparators of each output."""
    learns = max(statistics.fmean(g.errors(o)) for o in OUTPUTS) < NOT_LEARNING
    text = (f"EBP {'trains' if learns else 'does not train'} {g.label} to EBP-P {mean_sd(g.errors('test_ebp_p'))}% "
            f"and EBP-D {mean_sd(g.errors('test_ebp_d'))}% test error after {g.epochs_done()[0]} epochs "
            f"({len(g.runs)} seeds)")
    comparators = comparator_groups(results, g.key[0], g.key[1])
    for output in OUTPUTS:
        for kind, name in (("dense", "the best dense net"), ("local", "the best locally connected net")):
            other = best(comparators[kind], output)
            d = paired(g, other, output) if other else None
            if d is not None:
                text += (f"; its {_name(output)} is {size_spread(d)} points "
                         f"{'above' if d[0] > 0 else 'below'} {name} ({other.key[2]}, {mean_sd(other.errors(output))}% "
                         f"after {other.epochs_done()[0]} epochs; "
                         + ("1 seed paired: no spread)" if d[2] == 1 else f"{d[2]} seeds paired)"))
    return text


def _name(output: str) -> str:
    return {"test_ebp_p": "EBP-P", "test_ebp_d": "EBP-D"}[output]


def _base_profile(profile: str, scheme: str) -> str:
    """The reference scheme's profile of a profile of `scheme` ("named-e30-variance1" → "named-e30")."""
    suffix = f"-{scheme}"
    return profile[:-len(suffix)] if scheme != catalogue.DEFAULT_SCHEME and profile.endswith(suffix) else profile


def init_rows(results) -> list[dict]:
    """The initialisation schemes of ebp_conv_catalogue compared on the same CNN, data set and weights, paired by
    seed: one row per group of a scheme other than the reference that has a reference group of the same epochs
    and training images, with both groups' errors (mean ± SD, %) and scheme − reference of each output (points;
    mean ± SD over the shared seeds)."""
    groups = cnn_groups(results)
    by_key = {g.key: g for g in groups}
    rows = []
    for g in groups:
        dataset, weights, architecture, scheme, profile = g.key
        reference = by_key.get((dataset, weights, architecture, catalogue.DEFAULT_SCHEME,
                                _base_profile(profile, scheme)))
        if scheme == catalogue.DEFAULT_SCHEME or reference is None:
            continue
        row = {"network": f"{weights} {catalogue.catalogue_name(architecture) or architecture}, {dataset}",
               "scheme": scheme, "epochs": "/".join(map(str, g.epochs_done())), "finished": g.finished}
        for output in OUTPUTS:
            d = paired(g, reference, output)
            row[f"reference {_name(output)}"] = mean_sd(reference.errors(output))
            row[f"{scheme} {_name(output)}"] = mean_sd(g.errors(output))
            row[f"{_name(output)}: {scheme} − reference (points)"] = (
                "no shared seed" if d is None else
                f"{d[0]:+.2f}" + (f" ± {d[1]:.2f}" if d[1] is not None else "") + f" ({d[2]})")
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------------------
# EBP's successors on the same CNNs (reproduction.successors, profile "cnn")
# ----------------------------------------------------------------------------------------------------------

SUCCESSOR_PROFILE = "cnn"


def load_successors(root=None, profile: str = SUCCESSOR_PROFILE) -> list[dict]:
    """The finished successor records under root/<profile>/<dataset>/<run>/result.json (root: outputs/successors)
    whose net is a CNN, each checked (records.record_problems); ValueError naming a record that fails its check."""
    from reproduction import records
    from reproduction import successors as sc
    found = []
    for path in sorted(Path(root or sc.OUTPUT_DIR, profile).glob("*/*/result.json")):
        record = records.read_record(path)
        problems = records.record_problems(record)
        if problems:
            raise ValueError(f"{path}: {problems[0]}; rerun it (scripts/run_successors.py resumes) or set it aside")
        if record["finished"] and is_cnn(record["parameters"]["architecture"]):
            found.append(record)
    return found


def successor_errors(record: dict) -> dict:
    """A successor record's test errors (deployed: its packed ±1 net; predictive: BayesBiNN's Monte Carlo average,
    where present) and the NLL and ECE of its probabilistic output (the predictive where present, else the
    deployed net's softmax)."""
    outputs = record["evaluation"]["outputs"]
    probabilistic = outputs.get("predictive", outputs["deployed"])
    return {"deployed": record["evaluation"]["packed"]["error"],
            "predictive": outputs["predictive"]["test_error"] if "predictive" in outputs else None,
            "nll": probabilistic["nll"], "ece": probabilistic["ece"]}


def ebp_cnn_group(results, dataset: str, architecture: str) -> Group | None:
    """EBP's binary CNN group of a data set and net at the reference initialisation (cnn_groups), the one of most
    epochs where profiles differ; None if there is none."""
    groups = [g for g in cnn_groups(results) if g.key[:4] == (dataset, "binary", architecture, catalogue.DEFAULT_SCHEME)]
    return max(groups, key=lambda g: (min(g.epochs_done()), len(g.runs)), default=None)


def _paired_points(mine: dict, other: dict) -> str:
    """mean ± SD (pairs) of mine − other over shared seeds, in points (one pair: its value, no spread); "no shared
    seed" where none."""
    seeds = sorted(set(mine) & set(other))
    if not seeds:
        return "no shared seed"
    d = [100 * (mine[s] - other[s]) for s in seeds]
    return f"{statistics.fmean(d):+.2f}" + (f" ± {statistics.stdev(d):.2f}" if len(d) > 1 else "") + f" ({len(d)})"


def _mean_or_none(values: list) -> float | None:
    return None if not values or None in values else round(statistics.fmean(values), 1)


def ebp_cost(group: Group) -> dict:
    """An EBP group's training seconds per epoch and to its reported (last) epoch, mean over seeds: each run's share
    of its seed group's training time (reproduction.group). EBP's records hold wall seconds of a one-thread process,
    no CPU time, so the clock is named."""
    from reproduction.successors_report import machines
    runs = list(group.runs.values())
    return {"s/epoch": _mean_or_none([r["train_seconds"] / r["epochs_done"] for r in runs]),
            "s to best": _mean_or_none([r["train_seconds"] for r in runs]),
            "clock": "wall, 1 thread", "machine": machines([x for r in runs for x in r["sessions"]])}


def successor_cost(runs: list[dict]) -> dict:
    """A successor's training core-seconds per epoch (median over epochs) and to its best epoch (the one deployed),
    mean over seeds (successors.evaluate); None where a record holds wall seconds only."""
    from reproduction.successors_report import machines
    evaluations = [r["evaluation"] for r in runs]
    return {"s/epoch": _mean_or_none([e.get("cpu_seconds_per_epoch") for e in evaluations]),
            "s to best": _mean_or_none([e.get("cpu_seconds_to_best_epoch") for e in evaluations]),
            "clock": "CPU", "machine": machines([x for r in runs for x in r.get("sessions", [])])}


def successor_rows(results, successors: list[dict]) -> list[dict]:
    """Per data set and CNN of the successors' records: EBP's row (EBP-P and EBP-D, mean ± SD over seeds, %) and one
    row per successor method (deployed and predictive test error, NLL, ECE, seeds, epochs done) with its deployed
    error's paired difference from EBP-D and from EBP-P by seed (successor − EBP, points), and each row's training
    cost (ebp_cost, successor_cost: seconds, the clock they were read from, the machine class)."""
    by_net: dict = {}
    for r in successors:
        p = r["parameters"]
        by_net.setdefault((p["dataset"], p["architecture"]), {}).setdefault(p["method"], {})[p["seed"]] = r
    rows = []
    for (dataset, architecture), methods in sorted(by_net.items()):
        ebp = ebp_cnn_group(results, dataset, architecture)
        ebp_final = {} if ebp is None else {o: {s: r["final"][o] for s, r in ebp.runs.items()} for o in OUTPUTS}
        net = catalogue.catalogue_name(architecture) or architecture
        if ebp is not None:
            rows.append({"dataset": dataset, "net": net, "method": "EBP", "seeds": ",".join(map(str, sorted(ebp.runs))),
                         "epochs": "/".join(map(str, ebp.epochs_done())), "deployed": mean_sd(ebp.errors("test_ebp_d")),
                         "predictive": mean_sd(ebp.errors("test_ebp_p")), "nll": None, "ece": None,
                         "− EBP-D (points)": None, "− EBP-P (points)": None, **ebp_cost(ebp)})
        for method, runs in sorted(methods.items()):
            errors = {s: successor_errors(r) for s, r in sorted(runs.items())}
            deployed = {s: e["deployed"] for s, e in errors.items()}
            predictive = [e["predictive"] for e in errors.values() if e["predictive"] is not None]
            rows.append({"dataset": dataset, "net": net, "method": method, "seeds": ",".join(map(str, errors)),
                         "epochs": "/".join(str(runs[s]["epochs_done"]) for s in errors),
                         "deployed": mean_sd(list(deployed.values())),
                         "predictive": mean_sd(predictive) if predictive else None,
                         "nll": statistics.fmean(e["nll"] for e in errors.values()),
                         "ece": statistics.fmean(e["ece"] for e in errors.values()),
                         **{f"− {_name(o)} (points)": _paired_points(deployed, ebp_final[o]) if ebp else "no EBP run"
                            for o in ("test_ebp_d", "test_ebp_p")},
                         **successor_cost(list(runs.values()))})
    return rows


# ----------------------------------------------------------------------------------------------------------
# Image by image: EBP's CNN and the successors on the same test images, over seeds and images (reproduction.paired)
# ----------------------------------------------------------------------------------------------------------

EBP_SIDES = {"deployed": "EBP-D", "predictive": "EBP-P"}  # the outputs of an EBP run's predictions.npz


def ebp_predictions(group: Group, runs_dir) -> dict:
    """{"EBP-D" / "EBP-P": {"seeds", "predictions" (seeds × images uint8)}} of an EBP group, from the predictions.npz
    in each run's folder (reproduction.run_files); {} unless every seed of the group has one (records of code
    before that file have none: the group is then compared by seed only, successor_rows)."""
    from reproduction import run_files
    paths = {s: Path(runs_dir, r["run_dir"], run_files.PREDICTIONS_FILE) for s, r in sorted(group.runs.items())}
    if not all(p.exists() for p in paths.values()):
        return {}
    loaded = {s: run_files.load_predictions(p) for s, p in paths.items()}
    return {side: {"seeds": list(loaded), "predictions": np.stack([loaded[s][output] for s in loaded])}
            for output, side in EBP_SIDES.items()}


def image_pairs(results, successors: list[dict], runs_dir, successors_root=None, data_dir=None,
                n_boot: int = 1000) -> list[dict]:
    """paired.pair_rows for every pair of sides on each data set and CNN of the successors' records: the successors'
    outputs (paired.run_predictions) and EBP's EBP-D and EBP-P where its runs keep their predictions (ebp_predictions):
    A − B in points, the Welch interval (this test set) beside the interval over seeds and test images; a net of the
    catalogue by its name ("lenet")."""
    from reproduction import paired
    from reproduction import successors as sc
    groups = paired.run_predictions(successors, successors_root or sc.OUTPUT_DIR)
    for (dataset, architecture), sides in groups.items():
        ebp = ebp_cnn_group(results, dataset, architecture)
        if ebp is not None:
            sides.update(ebp_predictions(ebp, runs_dir))
    labels = {dataset: ebp_data.load_raw(dataset, data_dir)["test_labels"] for dataset, _ in groups}
    return [{**r, "net": catalogue.catalogue_name(r["net"]) or r["net"]} for r in paired.pair_rows(groups, labels, n_boot)]
