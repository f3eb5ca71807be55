"""The reproduction harness, one module per job.

parameters        the parameters of one experiment (a run of notebooks/experiment.ipynb), profiles, validation
architectures     architecture names: a name's layer list and each layer's kind (dense, local, conv)
records           machine and version records, git state, files written whole or not at all, run records
run_files         the files every run's folder has: their names, its lock, its record read back
folder            the folder of one run: where it lies, its lock, result.json, the checkpoint, its state
paper_tables      the paper's Tables 2-4 as data (paper_tables.csv) and the jobs that reproduce them
job               the runner's job: one run of the experiment notebook, frozen and validated once
runner            running jobs: papermill for one, a Dask cluster for a batch
group             runs that differ only in their seed, trained side by side (the JAX engine)
verify            replaying a run record's first epochs with the code that ran it, and comparing
results           reading results back into the tables' cells, and the tables as Markdown
band              the one rule of every comparison: a t interval on the run-to-run spread, pooled over alike cells
findings          the paper's findings, judged by paired per-seed differences on its numbers and on ours
agreement         every table cell judged against the paper, and the mechanisms that explain the cells outside
mechanisms        the one-layer binary offset: each candidate mechanism's paired effect
plots             learning curves, and the prolonged runs of the extended profile
tuned             the harness of the tuned baselines: split, grid, choice, schedule, early stopping, records
backprop          the backprop baseline at a practitioner's protocol
backprop_mlp      its network: a tanh multilayer perceptron
comparison        EBP against the backprop baseline, from the records
successors        EBP's successors (package successors) and EBP itself run by the tuned harness
successors_report the comparison of EBP with its successors, from the records
successors_plots  its figures: error against training cost, reliability diagrams
sensitivity       whether the successors' protocol cut a method short: reruns under a longer one, verdicts recomputed
conv_report       the convolutional EBP runs beside the dense and locally connected nets, from the records
paired            differences between two methods over seeds and test images (beside Welch's, on this test set)
"""
