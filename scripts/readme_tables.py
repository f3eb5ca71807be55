"""Write the headline from the committed runs, and copy it and the rendered results (written by
notebooks/tables.ipynb and successors.ipynb) into README.md and docs/maths.md, between markers.

    python scripts/readme_tables.py            # rewrite the headline and every block from its rendered file
    python scripts/readme_tables.py --check    # exit 1 if the headline or a block is out of date

The headline (outputs/runs/paper/headline.md, which the book's landing page includes too) is computed here from
the committed records: the paper's two headline cells beside ours, how many cells of Tables 2-4 hold the
paper's number within our band, what lies outside it and why, the paper's findings judged on ours, and what the
successors comparison says. Four blocks copy files. `headline` in README.md: that file. `glossary` in
README.md: docs/glossary.md, the book's glossary too.
`successors` in README.md: STE, Bop and BayesBiNN minus EBP tuned like them
(outputs/successors/tuned/brief.md, written by notebooks/successors.ipynb). `authors-code` in docs/maths.md: what
the authors' codes change, per row, paired with the spec's runs (outputs/runs/paper/authors_code.md). No document
carries hand-typed results:
tests/test_readme.py runs the check.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# block name: (the document that shows it, the rendered file it shows)
HEADLINE = Path("outputs/runs/paper/headline.md")
BLOCKS = {"headline": (Path("README.md"), HEADLINE), "glossary": (Path("README.md"), Path("docs/glossary.md")),
          "successors": (Path("README.md"), Path("outputs/successors/tuned/brief.md")),
          "authors-code": (Path("docs/maths.md"), Path("outputs/runs/paper/authors_code.md"))}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


START, END = markers("headline")


def with_tables(readme: str, tables: str, name: str = "headline", document: str = "README.md") -> str:
    """`readme` with everything between block `name`'s markers replaced by `tables`."""
    start, end = markers(name)
    if readme.count(start) != 1 or readme.count(end) != 1 or readme.index(start) > readme.index(end):
        raise ValueError(f"{document} must hold exactly one {start} ... {end} block")
    head, rest = readme.split(start)
    _, tail = rest.split(end)
    return f"{head}{start}\n{tables.strip()}\n{end}{tail}"


# The paper's headline cells (its abstract): Table 3, two hidden layers of 800 units, sampled dropout, EBP-P.
HEADLINE_CELLS = {"binary": (3, "B-EBP-P", "[800,800]"), "real": (3, "R-EBP-P", "[800,800]")}
# The reading of each table the headline counts: Table 4 with the non-connected weights held at h = 0, the
# reading the paper ran (notebooks/reproduction_evidence.ipynb).
HEADLINE_VARIANTS = {2: "main", 3: "main", 4: "Table 4 held"}


def table_variants(root: Path) -> tuple[list[dict], dict]:
    """(the paper's table rows, {variant: cells}) from the committed records under root/outputs/runs, as
    notebooks/tables.ipynb builds them: the main reading, Table 3 analytic, Table 4 held and the authors' codes."""
    from reproduction import agreement, paper_tables, results

    rows = paper_tables.read_paper_tables()
    loaded = results.results_of(results.load_results(root / "outputs" / "runs", committed_only=True), "paper")
    variants = {"main": results.table_cells(rows, loaded, "paper", "sampled", "absent"),
                "Table 3 analytic": results.table_cells(rows, loaded, "paper", "analytic", "absent"),
                "Table 4 held": results.table_cells(rows, loaded, "paper", "sampled", "held")}
    return rows, {**variants, **agreement.update_variants(rows, loaded, "paper")}


def _percent(cell) -> str:
    return f"{cell.mean:.2f}%" if cell.sd is None else f"{cell.mean:.2f} ± {cell.sd:.2f}%"


def headline_table(rows: list[dict], variants: dict) -> str:
    """Markdown: the paper's two headline numbers beside ours (mean ± SD over seeds)."""
    from reproduction import results

    by_key = {results.cell_key(r): r for r in rows}
    cells = [variants["main"].get(key) for key in HEADLINE_CELLS.values()]
    seeds = sorted({s for c in cells if c is not None for s in c.seeds})
    lines = [f"| MNIST, two hidden layers of 800, dropout | the paper | ours, mean ± SD over seeds "
             f"{', '.join(map(str, seeds))} |", "|---|---|---|"]
    for (weights, key), cell in zip(HEADLINE_CELLS.items(), cells):
        ours = "not run yet" if cell is None else f"**{_percent(cell)}**"
        lines.append(f"| {weights} weights ({key[1]}) | {by_key[key]['paper_error']:.2f}% | {ours} |")
    return "\n".join(lines)


# A mechanism of reproduction.agreement.mechanisms, by the words its line opens with, in plain words.
CAUSES = {"EBP-D rounding": "EBP-D's rounding to one net", "not converged": "curves still falling at epoch 120",
          "dropout reading": "the other dropout reading", "mask reading": "the other mask reading",
          "the authors'": "the authors' own code"}


def _cause(mechanism: str) -> str:
    return next(plain for opening, plain in CAUSES.items() if mechanism.startswith(opening))


def band_sentences(rows: list[dict], variants: dict) -> list[str]:
    """What reproduced (cells whose paper number lies in our band) and what did not, with the measured causes."""
    from reproduction import agreement
    from reproduction.results import cell_key

    inside, outside = [], []
    for table, variant in HEADLINE_VARIANTS.items():
        judged, out = agreement.judged_rows(table, rows, variants[variant], agreement.variant_spreads(variants, variant))
        inside.append(f"{len(judged) - len(out)} of {len(judged)}{' cells' * (table == 2)} of Table {table}")
        outside += [(row, variant) for row in out]
    causes = {(row["row"], row["column"], row["table"]): {_cause(m) for m in agreement.mechanisms(row, rows, variants, v)}
              for row, v in outside}
    unexplained = [(row, v) for row, v in outside if not causes[row["row"], row["column"], row["table"]]]
    better = sum(variants[v][cell_key(row)].mean < row["paper_error"] for row, v in unexplained)
    counted = {c: sum(c in found for found in causes.values()) for c in CAUSES.values()}
    named = ", ".join(f"{c} ({n})" for c, n in counted.items() if n)
    return [f"**Reproduced.** The paper's number lies within our band in {', '.join(inside[:-1])} and "
            f"{inside[-1]} (masks held).",
            f"**Not reproduced.** {len(outside)} cells lie outside it. {len(outside) - len(unexplained)} have a "
            f"measured cause: {named}. In {better} of the {len(unexplained)} others ours is the lower error."]


def findings_sentence(rows: list[dict], variants: dict) -> str:
    """The paper's findings judged on ours (Table 4 with the masks held, as HEADLINE_VARIANTS): how many agree,
    which disagree."""
    from reproduction import findings

    columns = {label: column[1:] for label, column in
               zip(("main", "Table 4 held"), findings.judged_columns(rows, variants, ["main", "Table 4 held"])[-2:])}
    verdicts = [(f, findings.verdict(f, *columns["Table 4 held" if 4 in f.tables else "main"])["verdict"])
                for f in findings.paper_findings()]
    count = {word: sum(v == word for _, v in verdicts) for word in ("agree", "disagree", "inconclusive")}
    against = "; ".join(f.title.split(":")[0] for f, v in verdicts if v == "disagree")
    return (f"**The paper's findings.** Our runs support {count['agree']} of its {len(verdicts)} findings, are too "
            f"close to call on {count['inconclusive']} and contradict {count['disagree']}"
            + (f": {against}." if against else "."))


def successors_sentence(root: Path) -> str:
    """What the tuned successors' comparison with EBP says: against the paper-protocol EBP, counted over the
    comparisons with two seeds a side (Welch); against EBP tuned like them, judged by the interval over images and
    seeds (successors_report.tuned_sentence); which preprocessing each side chose on MNIST."""
    from reproduction import successors_report as report
    from reproduction.results import load_results

    folder = root / "outputs" / "successors"
    successors = report.load_successors(folder, "tuned")
    ebp = load_results(root / "outputs" / "runs", committed_only=True)
    rows = report.successor_rows(successors) + [r for d in report.EBP_PROFILES for r in report.ebp_rows(ebp, d)]
    comparisons = report.tuned_comparisons(rows, report.paired_intervals(folder, "tuned", n_boot=0, results=successors))
    counts = report.tally_counts(rows)
    deployed = sum((c["deployed"] for c in counts.values()), start=type(counts["mnist"]["deployed"])())
    mnist, fashion = (counts[d]["predictive"] for d in ("mnist", "fashion-mnist"))

    def unit(methods):
        runs = [r for r in successors if r["parameters"]["dataset"] == "mnist" and r["parameters"]["method"] in methods]
        return sum(r["grid"]["chosen"].get("preprocessing") == "unit" for r in runs), len(runs)
    (theirs, of_theirs), (ours, of_ours) = unit(report.SUCCESSORS), unit(report.TUNED_EBP)
    tuned = f"; tuned EBP, in {ours} of {of_ours}" if of_ours else ""
    return (f"**Today's methods.** Tuned STE, Bop and BayesBiNN train ±1 nets with lower error than the paper-protocol "
            f"EBP-D in {deployed['lower']} of {deployed.total()} comparisons. {report.tuned_sentence(comparisons)} "
            f"On MNIST {theirs} of their {of_theirs} runs chose pixels/255 on validation{tuned}. BayesBiNN's averaged "
            f"prediction beats the paper-protocol EBP-P in {mnist['lower']} of {mnist.total()} on MNIST and loses "
            f"{fashion['higher']} of {fashion.total()} on Fashion-MNIST.")


def cnn_sentence(root: Path) -> str:
    """EBP on convolutional nets, beyond the paper (reproduction.conv_report.headline)."""
    from reproduction import conv_report
    from reproduction.results import load_results

    return conv_report.headline(load_results(root / "outputs" / "runs", committed_only=True))


def headline(root: Path = REPO) -> str:
    """The headline Markdown (HEADLINE), from the committed records under `root`."""
    rows, variants = table_variants(root)
    return "\n\n".join([
        "**The answer in brief.** The paper's headline numbers beside ours; the sentences below count every cell "
        "and finding (generated from the committed runs by `scripts/readme_tables.py`; terms in the glossary):",
        headline_table(rows, variants),
        "\n".join(f"- {s}" for s in [*band_sentences(rows, variants), findings_sentence(rows, variants),
                                      successors_sentence(root), cnn_sentence(root)])]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the repository (README.md, docs/ and outputs/)")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if they differ")
    parser.add_argument("--blocks-only", action="store_true",
                        help=f"copy the blocks without computing {HEADLINE} from the records again")
    args = parser.parse_args(argv)
    if not args.blocks_only:
        path, text = args.root / HEADLINE, headline(args.root)
        if args.check and (not path.is_file() or path.read_text() != text):
            print(f"{HEADLINE} is not the headline of the committed runs: run python scripts/readme_tables.py",
                  file=sys.stderr)
            return 1
        if not args.check:
            path.write_text(text)
    for name, (document, rendered) in BLOCKS.items():
        path = args.root / document
        text = path.read_text()
        updated = with_tables(text, (args.root / rendered).read_text(), name, str(document))
        if args.check and updated != text:
            print(f"{document}'s {name} block does not show {rendered}: run python scripts/readme_tables.py",
                  file=sys.stderr)
            return 1
        if not args.check and updated != text:
            path.write_text(updated)
    return 0

if __name__ == "__main__":
    sys.exit(main())
