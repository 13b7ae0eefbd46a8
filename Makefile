# devbench: `make test` and `make bench` do all the set-up on a fresh machine.
PYTHON ?= python3
TORCH ?= 2.13.0
VENV := .venv
PY := $(VENV)/bin/python
ASV := $(PY) -m asv
# Benchmarks run in the project's own .venv (asv's "existing" environment): no
# network needed, and the torch there is the one `make` installed.
ASV_ENV := -E existing:$(abspath $(PY))
COMMIT = $(shell git rev-parse HEAD)
BASE ?= main
BENCH ?= .
# Every benchmark and test process imports torch, and many import torch._dynamo (torch.optim
# does); with PYTHONDONTWRITEBYTECODE set, as on some CI images, each of them compiles those
# modules from source again. Python writes the bytecode on first import and reuses it after.
unexport PYTHONDONTWRITEBYTECODE
REPORT_DIR ?= reports/latest

.PHONY: compare-torch
.PHONY: help venv test test-pytest test-asv test-asv-1 test-asv-2 test-fast gpu-run device-bundle lint bench machine quick compare publish preview report sample-report work-lock clean

help:
	@echo "make test      pytest (asv check among it) and a quick dry run of every benchmark"
	@echo "make test-fast pytest without the tests that run asv itself"
	@echo "make bench     record the machine, run the whole suite, publish the HTML"
	@echo "make quick     one sample of every benchmark (asv run --quick), results kept"
	@echo "make compare   devbench compare BASE HEAD: paired turns, a verdict per figure (BASE=main by default)"
	@echo "make compare-torch NEW=2.12.0  this commit under torch OLD (default TORCH) against NEW, paired"
	@echo "make publish   asv publish: the HTML site under .asv/html, working offline (devbench.report.site)"
	@echo "make report    devbench report: .asv/results -> reports/latest/ (Markdown, HTML, CSV, PNG)"
	@echo "make preview   serve the HTML site on localhost"
	@echo "make sample-report  rebuild the committed samples (reports/sample/, reports/history-attribution/report/)"
	@echo "make work-lock     record benchmarks/work-lock.json after deciding each changed benchmark's work_version"
	@echo "make gpu-run       devbench gpu-run: the whole suite in one time-boxed call, packed into .asv/gpu-run"
	@echo "make device-bundle .devrun/: what a GPU machine without a package index needs (scripts/device-run.sh)"

venv: $(VENV)/.installed

# One pip call, so the index is read once: torch pinned beside the project, so that its
# "torch>=2.1" does not pull another build, and everything else from pyproject.toml's [dev]
# extra. --no-compile: Python compiles what it imports on first use; compiling all of torch up
# front doubled the install. One import of what the test and benchmark processes import then
# compiles that part once: otherwise make test's first processes, started together, each compiled
# it (on the VM, a cold make test took 290 CPU-s and 211 s; with this step, 262 CPU-s and 201 s).
WARM_IMPORTS := torch, torch._dynamo, torch.distributed, torch.utils.benchmark, numpy, pandas, pyarrow, \
	matplotlib.pyplot, asv, asv_runner, pytest, xdist, devbench.cli
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --no-compile "torch==$(TORCH)" -e ".[dev]"
	$(PY) -c "import $(WARM_IMPORTS)"
	touch $@

lint: venv
	$(PY) -m ruff check src benchmarks tests scripts

# make test runs three streams on two cores (each target's output is printed whole when it
# ends): pytest in three workers (pytest-xdist, a test file per worker at a time) and asv's dry
# run of the suite in two halves. Much of each stream waits on processes it started (asv's
# forks, worlds of ranks, compare's workers); three streams, and three pytest workers, keep
# both cores busy through those waits (two workers left a third of the cores idle). Each torch process gets one CPU thread: a pool of two threads in each stream
# waits on the others at every parallel region (docs/noise.md, "Threads"). scripts/group.sh
# runs the streams as one session, so that a SIGTERM to make stops every process of them.
test: venv
	env DEVBENCH_THREADS=1 OMP_NUM_THREADS=1 scripts/group.sh $(MAKE) --no-print-directory -j3 --output-sync=target test-pytest test-asv-1 test-asv-2

test-pytest: venv
	$(PY) -m pytest -n 3 --dist loadfile

# asv's --quick times each time_ benchmark once; DEVBENCH_BLOCKS=1 does the same for the track_
# figures (one engine block each). Every combination still sets up, checks its work and reports.
test-asv: machine
	$(ASV) check $(ASV_ENV)
	$(DRY_RUN) --bench '$(BENCH)' $(DRY_END)

# test-asv in two halves of about equal time: these modules, then every other one (a new
# module falls in the second half; asv's --bench is a Python regular expression).
# DEVBENCH_CHECKED (devbench.engine.prepare.check_once): a workload is checked against its reference by the
# first benchmark process that sets it up in this dry run, and only warmed up by the later ones that set
# up the same workload (MatmulSquare's time_ and track_ figures, DeviceCopy's three): every workload is
# still checked once, as in each side of a compare. The folder is new for each call and removed after it.
# DEVBENCH_HOLD_S: a burst idles, and a sustained product loads, 0.1 s before its blocks, not 1 s and 5 s
# (devbench.engine.bursts.held): MatmulAchievable's figures, 12 s of waiting on the CPU, in the same code.
# DEVBENCH_SEARCH_BYTES: the achievable search times the CPU grid's shapes of at most 32 MiB (nine, none over
# 2.2 GFLOP), not all 28 up to n=4,096: the same code, 50 s less on one thread (a fresh machine has no search cached).
# DEVBENCH_CPU_CACHE: a CPU copy rotates over 32 MiB of buffers (4 x 8 MiB), not over 4 x the last-level caches this
# host lists: the same code, 40 s less of building and checking DeviceCopy's sizes.
# `asv check` (each benchmark's set-up, call and teardown signatures) runs inside pytest here
# (tests/test_benchmarks.py): as a command it started two more processes that import torch.
ASV_HALF := bench_(matmul|collectives)[.]
# Each half reads the asv machine from a HOME of its own: asv rewrites ~/.asv-machine.json whenever a run starts
# (asv.machine.Machine.load), and one half once read it empty while the other wrote it.
DRY_RUN = d=$$(mktemp -d) && mkdir "$$d/home" && cp "$$HOME/.asv-machine.json" "$$d/home/" && \
	XDG_CACHE_HOME="$${XDG_CACHE_HOME:-$$HOME/.cache}" HOME="$$d/home" DEVBENCH_CHECKED=$$d \
	DEVBENCH_SWEEP_DIR=$$d/sweep DEVBENCH_BLOCKS=1 DEVBENCH_HOLD_S=0.1 DEVBENCH_SEARCH_BYTES=33554432 DEVBENCH_CPU_CACHE=8388608 \
	$(ASV) run $(ASV_ENV) --quick --dry-run --show-stderr
DRY_END = ; rc=$$?; rm -rf "$$d"; exit $$rc

test-asv-1: machine
	$(DRY_RUN) --bench '^$(ASV_HALF)' $(DRY_END)

# The second half runs the swept classes' CPU points through the measuring process (devbench.engine.sweep), the
# path their GPU points take; the first half runs them in asv's own processes, as a CPU run does.
test-asv-2: machine
	export DEVBENCH_SWEEP=all; $(DRY_RUN) --bench '^(?!$(ASV_HALF))' $(DRY_END)

# A change to devbench.workloads or the engine fails make test until recorded here: raise the
# work_version of every benchmark class whose work changed, then record (devbench.engine.worklock).
work-lock: venv
	$(PY) -m devbench.engine.worklock --write

test-fast: venv
	$(PY) -m pytest -n 2 --dist loadfile -m "not slow"

# asv writes machine.json into .asv/results/<machine>/ as each run starts, creating the folder unless it exists:
# make test's two asv halves start together, and in a fresh clone one of them failed on the other's folder
machine: venv
	$(PY) -m devbench.cli machine
	mkdir -p .asv/results/$$($(PY) -c 'from asv.machine import Machine; print(Machine.get_unique_machine_name())')

bench: machine
	$(ASV) run $(ASV_ENV) --set-commit-hash $(COMMIT) --record-samples --show-stderr --bench '$(BENCH)'
	$(MAKE) publish
	$(MAKE) report

report: venv
	$(VENV)/bin/devbench report --results .asv/results --out $(REPORT_DIR)

# The committed sample reports: reports/sample/ (asv results of the CPU VM and of an H200, and the A/A
# devbench compare in reports/compare-power/aa-idle/) and the history of reports/history-attribution/
# (twelve commits run twice, its steps labelled machine or code). Their inputs are committed, so anyone
# can rebuild them. `make report` writes the user's own report to reports/latest/, which git ignores.
# The samples leave out the CSV (megabytes of the same rows the Markdown and HTML show): reports/ holds evidence.
SAMPLE_FORMAT := --format md,html,png
sample-report: venv
	$(VENV)/bin/devbench report --results reports/asv-results --compare reports/compare-power/aa-idle --out reports/sample $(SAMPLE_FORMAT)
	$(VENV)/bin/devbench report --results reports/history-attribution --out reports/history-attribution/report $(SAMPLE_FORMAT)

quick: machine
	$(ASV) run $(ASV_ENV) --set-commit-hash $(COMMIT) --quick --show-stderr --bench '$(BENCH)'

compare: machine
	$(VENV)/bin/devbench compare $(BASE) HEAD --bench '$(BENCH)' --out .asv/compare

# Did a torch upgrade make it slower? One environment per torch release, built once and kept
# (.venv-torch-<version>, CPU wheels where the index has them: TORCH_INDEX), then a paired compare of this
# commit in both: the same statistics as commit against commit, environment against environment.
OLD ?= $(TORCH)
TORCH_INDEX ?=
.venv-torch-%/.installed: pyproject.toml
	test -x .venv-torch-$*/bin/python || $(PYTHON) -m venv .venv-torch-$*
	.venv-torch-$*/bin/python -m pip install -q --no-compile $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) "torch==$*" -e ".[report,gpu]"
	touch $@

compare-torch: venv
	@test -n "$(NEW)" || { echo "make compare-torch: name the torch to judge, e.g. NEW=2.12.0 (OLD=$(OLD) is the base)"; exit 2; }
	$(MAKE) --no-print-directory .venv-torch-$(OLD)/.installed .venv-torch-$(NEW)/.installed
	$(VENV)/bin/devbench compare HEAD HEAD --base-python .venv-torch-$(OLD)/bin/python \
		--head-python .venv-torch-$(NEW)/bin/python --bench '$(BENCH)' --out .asv/compare-torch-$(OLD)-$(NEW)

# The suite under a time budget (BUDGET_S seconds): plan, asv run, CUDA tests, validate, packed (devbench.gpu.gpurun)
BUDGET_S ?= 480
gpu-run: venv
	$(VENV)/bin/devbench gpu-run --budget-s $(BUDGET_S) --out .asv/gpu-run

# For a lent GPU machine with torch but no asv and no package index: carry .devrun, run scripts/device-run.sh
device-bundle:
	PYTHON=$(PYTHON) scripts/device-bundle.sh

# asv's page loads its scripts from CDNs; devbench.report.site serves them from the site (fetched once, checked)
publish: venv
	$(ASV) publish
	$(PY) -m devbench.report.site .asv/html

preview: publish
	$(ASV) preview

clean:
	rm -rf .asv/html .asv/env
