# The README's two commands. Both create the virtual environment .venv on first use and reinstall it
# whenever requirements.txt changes (the stamp file below is older than requirements.txt).
#   make reproduce   set up, then run the main job: regenerate Tables 2-4 (quick profile; PROFILE=paper for the
#                    paper's protocol; DATASET=fashion-mnist for the same runs on Fashion-MNIST) with
#                    scripts/run_tables.py, skipping finished runs, and render that profile's runs (also when some
#                    failed) with a copy of notebooks/tables.ipynb executed into the runs' folder,
#                    $(RUNS_DIR)/$(PROFILE)[-$(DATASET)]/tables.ipynb
#                    (it writes $(RUNS_DIR)/$(PROFILE)/tables.md, summary.md, agreement.png and, MNIST beside
#                    Fashion-MNIST, $(RUNS_DIR)/$(PROFILE)-fashion-mnist/tables.md), then says where they are
#                    (scripts/reproduce.py); RUNS_DIR is outputs/runs unless given
#   make test        set up, then run the whole test suite (pytest: tests/ and notebooks/ through nbval)
# Also: make lab (JupyterLab on the notebooks), make demo (one short training run), make benchmark (fast engine
# against the reference), make backprop (the backprop baseline), make binary-benchmark (the bit-packed binary network against the float one),
# make test-portability (the suite under other OpenBLAS / numba / numpy kernels).
# No command rewrites a tracked file unless asked: the benchmark writes .cache/benchmark.json (BENCHMARK_OUT=... to
# change it, e.g. outputs/benchmark.json to record a new benchmark).

# `make` with no target lists the targets (make help).
.DEFAULT_GOAL := help

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
# Where reproduce trains and renders: outputs/runs, whose quick and paper folders hold the committed runs (they are
# skipped), or another folder, e.g. RUNS_DIR=$$(mktemp -d) to train every run from scratch as .ci/run does.
# Absolute for the tables notebook, which runs in notebooks/.
RUNS_DIR ?= outputs/runs
RUNS_PATH := $(abspath $(RUNS_DIR))

.PHONY: reproduce lab demo benchmark binary-benchmark backprop verify test test-fast test-portability time-notebooks venv \
	clean-venv

# scripts/reproduce.py: scripts/run_tables.py, then the tables notebook rendered from whatever finished (also when
# runs failed), then where the tables and the figure are; its exit status is the runs'.
reproduce: $(STAMP)
	$(THREADS_ENV) $(PYTHON) scripts/reproduce.py --all --profile $(PROFILE) --dataset $(DATASET) \
		--runs-dir $(RUNS_PATH) $(RUN_ARGS)

demo: $(STAMP)
	$(THREADS_ENV) $(PYTHON) scripts/demo.py

BENCHMARK_OUT ?= .cache/benchmark.json

# Jupyter refuses to start as root (as in most containers) unless given --allow-root. LAB_ARGS: more options,
# e.g. LAB_ARGS="--no-browser --port 8890".
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)
	@echo "Starting JupyterLab on notebooks/: open the URL it prints below, http://127.0.0.1:<port>/lab?token=..."
	$(PYTHON) -m jupyter lab notebooks/ $(LAB_ROOT) $(LAB_ARGS)

# BENCHMARK_ARGS: more options of scripts/benchmark.py, e.g. "--seconds 0.2 --skip-epoch" for a short look.
benchmark: $(STAMP)
	$(THREADS_ENV) $(PYTHON) scripts/benchmark.py --out $(BENCHMARK_OUT) $(BENCHMARK_ARGS)

# Replay the first VERIFY_EPOCHS epochs of each run folder in RUNS from the commit it names, and compare with its
# record (reproduction/verify.py); writes verification.json into each folder. E.g.
# make verify RUNS="outputs/runs/paper/binary-200 outputs/runs/paper/real-1000"
VERIFY_EPOCHS ?= 1
verify: $(STAMP)
	@test -n "$(RUNS)" || { echo 'usage: make verify RUNS="outputs/runs/paper/<run> ..." [VERIFY_EPOCHS=1]'; exit 2; }
	$(THREADS_ENV) $(PYTHON) -m reproduction.verify $(RUNS) --epochs $(VERIFY_EPOCHS)

# The backprop baseline (reproduction/backprop.py): every configuration on MNIST and Fashion-MNIST, skipping finished runs.
backprop: $(STAMP)
	$(THREADS_ENV) $(PYTHON) scripts/run_backprop.py --all

# The bit-packed binary network against the float32 EBP-D path (outputs/binary_inference.json records one run).
BINARY_BENCHMARK_OUT ?= .cache/binary_inference.json

# BINARY_BENCHMARK_ARGS: more options of scripts/binary_inference.py, e.g. "--n-train 2000 --rounds 1".
binary-benchmark: $(STAMP)
	$(THREADS_ENV) NUMBA_NUM_THREADS=1 $(PYTHON) scripts/binary_inference.py --out $(BINARY_BENCHMARK_OUT) \
		$(BINARY_BENCHMARK_ARGS)

# Two pytest-xdist workers (TEST_WORKERS; loadfile keeps each file, and so each notebook's cells, on one worker and
# kernel: plain -n 2 would split a notebook across workers), then the tests marked `alone` (pytest.ini: they kill a
# runner or a worker and time its end) in one process, so that no second worker races them (exit status 5: PYTEST_ARGS
# selected none of them).
TEST_WORKERS ?= 2
test: lint
	$(THREADS_ENV) $(PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone" --durations=15 $(PYTEST_ARGS)
	$(THREADS_ENV) $(PYTHON) -m pytest -m alone --durations=15 $(PYTEST_ARGS) || [ $$? -eq 5 ]

# While working: the unit tests and notebooks that are not marked slow (tests/conftest.py: notebooks from
# outputs/notebook_times.json, tests from tests/durations.json), a few minutes on two idle cores. CI runs `make test`.
test-fast: lint
	$(THREADS_ENV) $(PYTHON) -m pytest -m "not slow" --durations=15 $(PYTEST_ARGS)

# ruff with the rules of pyproject.toml, over the code, the tests and the notebooks (make test runs it first).
lint: $(STAMP)
	$(PYTHON) -m ruff check .

# The whole suite under other kernel selections (OPENBLAS_CORETYPE, NUMBA_CPU_NAME, NPY_DISABLE_CPU_FEATURES),
# one after another (about 4x the time of `make test`); PORTABILITY_OUT=outputs/portability.json records it.
PORTABILITY_OUT ?= .cache/portability.json

# Every numbered notebook as CI runs it (strict nbval, one BLAS thread), each with a cold numba cache; refuses a
# loaded machine unless NOTEBOOK_TIMES_ARGS=--allow-loaded.
NOTEBOOK_TIMES_OUT ?= .cache/notebook_times.json
time-notebooks: $(STAMP)
	$(PYTHON) scripts/time_notebooks.py --out $(NOTEBOOK_TIMES_OUT) $(NOTEBOOK_TIMES_ARGS)

test-portability: $(STAMP)
	$(THREADS_ENV) $(PYTHON) scripts/portability.py --output $(PORTABILITY_OUT) -- $(PYTEST_ARGS)

venv: $(STAMP)

# The project itself is installed editable (pyproject.toml), without a download: notebooks, scripts and Dask
# workers import ebp_lib and the reproduction package from .venv, wherever they run.
$(STAMP): requirements.txt pyproject.toml
	@test -n "$(BOOTSTRAP_PYTHON)" || { echo "error: need python3.11 (or python3) on PATH" >&2; exit 1; }
	test -x $(PYTHON) || $(BOOTSTRAP_PYTHON) -m venv $(VENV)
	$(PYTHON) -m pip install -r requirements.txt
	$(PYTHON) -m pip install --no-deps --no-build-isolation -e .
	touch $(STAMP)

clean-venv:
	rm -rf $(VENV)

# The notebooks (00-09, then tables, comparison, experiment) and docs/maths.md as a static HTML book, built
# offline from the committed outputs (never executed) by Jupyter Book 1.x with book/_config.yml and
# book/_toc.yml; open $(BOOK_OUT)/_build/html/book/index.html, its landing page (_build/html/index.html only
# redirects there). About a minute (56-78 s measured on 2 loaded cores). tests/test_book.py builds it again and reads every
# page in headless Chromium.
BOOK_OUT ?= .cache/book

book: $(STAMP)
	$(PYTHON) scripts/build_book.py --out $(BOOK_OUT)

# One line per target; tests/test_makefile.py fails when a target has none.
define HELP
make TARGET, where TARGET is one of (all but help and clean-venv first set up .venv from requirements.txt):
  reproduce         regenerate Tables 2-4 (PROFILE=quick|paper, DATASET=mnist|fashion-mnist) and render them
  test              the whole test suite: tests/ and every notebook through nbval (the README's test command)
  test-fast         the tests and notebooks not marked slow, for working (a few minutes; CI runs make test)
  book              the notebooks and docs/maths.md as an HTML book, offline: .cache/book/_build/html/book/index.html
  lab               JupyterLab on notebooks/
  demo              one short training run
  benchmark         the fast engine against the reference (writes .cache/benchmark.json)
  backprop          the backprop baseline (tanh MLPs, fair protocol), every configuration, skipping finished runs
  binary-benchmark  the bit-packed binary network against the float32 one (writes .cache/binary_inference.json)
  test-portability  the whole test suite under other OpenBLAS / numba / numpy kernels
  time-notebooks    each numbered notebook under strict nbval with a cold numba cache (writes .cache/notebook_times.json)
  lint              ruff over the code, tests and notebooks (the rules are in pyproject.toml; make test runs it)
  verify            replay run records' first epochs from their commits: make verify RUNS="outputs/runs/paper/<run> ..."
  venv              create or update .venv only
  clean-venv        delete .venv
  help              this list (what `make` alone prints)
endef
export HELP

help:
	@echo "$$HELP"

.PHONY: book help lint
