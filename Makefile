# The README's two commands. Both create the virtual environment .venv on first use and reinstall it
# whenever requirements.txt changes (the stamp file below is older than requirements.txt).
#   make reproduce   set up, then run the main job: regenerate Tables 2-4 (quick profile; PROFILE=paper for the
#                    paper's protocol; DATASET=fashion-mnist for the same runs on Fashion-MNIST) with
#                    scripts/run_tables.py, skipping finished runs, and render that profile's runs with a copy of
#                    notebooks/tables.ipynb executed into outputs/runs/$(RESULTS)/tables.ipynb (it writes
#                    outputs/runs/$(PROFILE)/tables.md and, MNIST beside Fashion-MNIST,
#                    outputs/runs/$(PROFILE)-fashion-mnist/tables.md)
#   make test        set up, then run the whole test suite (pytest: tests/ and notebooks/ through nbval)
# Also: make lab (JupyterLab on the notebooks), make demo (one short training run), make benchmark (fast engine
# against the reference), make backprop (the scikit-learn baseline), make binary-benchmark (the bit-packed binary network against the float one),
# make test-portability (the suite under other OpenBLAS / numba / numpy kernels).
# No command rewrites a tracked file unless asked: the benchmark writes .cache/benchmark.json (BENCHMARK_OUT=... to
# change it, e.g. outputs/benchmark.json to record a new benchmark).

# python3.11 if it runs, else python3.
BOOTSTRAP_PYTHON := $(shell for p in python3.11 python3; do $$p -c 'import sys' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV   := .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.requirements-installed

# One BLAS/OpenMP thread per process unless the caller says otherwise: on 2-core machines, threaded BLAS
# inside the notebook kernels and the test process oversubscribes the cores and makes everything slower.
THREADS_ENV := OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=$${OPENBLAS_NUM_THREADS:-1} \
               MKL_NUM_THREADS=$${MKL_NUM_THREADS:-1}

PROFILE ?= quick
DATASET ?= mnist
# The runs' folder under outputs/runs/, as ebp_experiments.results_folder names it: $(PROFILE) for MNIST (the
# paper's data set), $(PROFILE)-$(DATASET) for another.
RESULTS := $(PROFILE)$(if $(filter-out mnist,$(DATASET)),-$(DATASET))

.PHONY: reproduce lab demo benchmark binary-benchmark backprop test test-portability venv clean-venv

reproduce: $(STAMP)
	$(THREADS_ENV) $(PYTHON) scripts/run_tables.py --all --profile $(PROFILE) --dataset $(DATASET) $(RUN_ARGS)
	$(THREADS_ENV) $(PYTHON) -m papermill notebooks/tables.ipynb outputs/runs/$(RESULTS)/tables.ipynb \
		--cwd notebooks -p profile $(PROFILE) -p committed_only False

demo: $(STAMP)
	$(THREADS_ENV) $(PYTHON) scripts/demo.py

BENCHMARK_OUT ?= .cache/benchmark.json

lab: $(STAMP)
	$(PYTHON) -m jupyter lab notebooks/

benchmark: $(STAMP)
	$(THREADS_ENV) $(PYTHON) scripts/benchmark.py --out $(BENCHMARK_OUT)

# The backprop baseline (scikit-learn): every configuration on MNIST and Fashion-MNIST, skipping finished runs.
backprop: $(STAMP)
	$(THREADS_ENV) $(PYTHON) scripts/run_backprop.py --all

# The bit-packed binary network against the float32 EBP-D path (outputs/binary_inference.json records one run).
BINARY_BENCHMARK_OUT ?= .cache/binary_inference.json

binary-benchmark: $(STAMP)
	$(THREADS_ENV) NUMBA_NUM_THREADS=1 $(PYTHON) scripts/binary_inference.py --out $(BINARY_BENCHMARK_OUT)

# Serial by default. `make test PYTEST_ARGS="-n 2 --dist loadfile"` runs two pytest-xdist workers (loadfile keeps
# each notebook's cells on one worker and kernel; plain -n 2 would split a notebook across workers). Measured on
# this 2-core machine under heavy outside load: 229 passed both ways, 387 s serial vs 293 s with -n 2, the same
# CPU time (about 135 s user+sys), so on an idle machine the gain is at most about a minute, not worth doubling memory and
# racing the timing-sensitive kill-and-resume test against a second worker.
test: $(STAMP)
	$(THREADS_ENV) $(PYTHON) -m pytest --durations=15 $(PYTEST_ARGS)

# The whole suite under other kernel selections (OPENBLAS_CORETYPE, NUMBA_CPU_NAME, NPY_DISABLE_CPU_FEATURES),
# one after another (about 4x the time of `make test`); PORTABILITY_OUT=outputs/portability.json records it.
PORTABILITY_OUT ?= .cache/portability.json

test-portability: $(STAMP)
	$(THREADS_ENV) $(PYTHON) scripts/portability.py --output $(PORTABILITY_OUT) -- $(PYTEST_ARGS)

venv: $(STAMP)

$(STAMP): requirements.txt
	@test -n "$(BOOTSTRAP_PYTHON)" || { echo "error: need python3.11 (or python3) on PATH" >&2; exit 1; }
	test -x $(PYTHON) || $(BOOTSTRAP_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install -r requirements.txt
	touch $(STAMP)

clean-venv:
	rm -rf $(VENV)
