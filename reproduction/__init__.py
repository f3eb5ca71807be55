"""The reproduction harness, one module per job.

parameters    the parameters of one experiment (a run of notebooks/experiment.ipynb), profiles, validation
records       machine and version records, git state, files written whole or not at all, run records
folder        the folder of one run: where it lies, its lock, result.json, the checkpoint, its state
paper_tables  the paper's Tables 2-4 as data (paper_tables.csv) and the jobs that reproduce them
runner        running jobs: papermill for one, a Dask cluster for a batch
results       reading results back into the tables' cells, and the tables as Markdown
band          the one rule of every comparison: a t interval on the run-to-run spread (no binomial term)
findings      the paper's findings, judged by paired per-seed differences on its numbers and on ours
plots         learning curves, and the prolonged runs of the extended profile
agreement     every table cell judged against the paper, and the mechanisms that explain the cells outside
backprop      the backprop baseline (backprop_mlp: its network); comparison: EBP against it
"""
