# The two set-up-and-run commands of README.md. Both create .venv on first use.
#   make demo   install, then run the embedded offline demo (snakemake --cores 2)
#   make test   install, then lint and run the whole test suite (every tier)
#   make test-fast   the unit tier only (a couple of minutes); make lint   the style checks only
#   make demo TORCH=cpu   the same, with PyTorch's CPU build (a machine without a GPU)
VENV ?= .venv
CORES ?= 2
BIN := $(abspath $(VENV))/bin
# Which torch build the first install takes. Default: `torch==2.13.0` from PyPI, which on
# Linux x86_64 is the CUDA build (it pulls the nvidia-* wheels, several GB). TORCH=cpu takes
# the same version from PyTorch's CPU wheel index instead. It only matters when .venv is
# created: to switch, remove .venv (or the $(VENV)/.installed marker) and install again.
TORCH ?=
ifeq ($(TORCH),cpu)
TORCH_INDEX := --index-url https://download.pytorch.org/whl/cpu
else ifneq ($(TORCH),)
$(error TORCH=$(TORCH): leave TORCH unset (torch from PyPI) or set TORCH=cpu (PyTorch's CPU wheel index))
endif
# GPU=1: also install requirements-gpu.txt (CTranslate2's CUDA 12 cuBLAS); by default where
# nvidia-smi answers. Like TORCH, it only matters when .venv is created.
GPU ?= $(shell nvidia-smi -L > /dev/null 2>&1 && echo 1 || echo 0)
# Rules call `python -m workflow_scripts...`: the environment's python must come first.
export PATH := $(BIN):$(PATH)

.PHONY: demo test install preflight status lint test-fast test-integration test-multiprocess test-cluster gpu-check gpu-check-smoke

install: $(VENV)/.installed

# torch is installed first and pinned, so that requirements.txt's torch==2.13.0 finds it
# installed (the CPU build's version, 2.13.0+cpu, satisfies the pin) and pip does not fetch
# another build.
$(VENV)/.installed: requirements.txt requirements-test.txt requirements-gpu.txt
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_INDEX) torch==2.13.0
	$(BIN)/python -m pip install --quiet -r requirements-test.txt
	if [ "$(GPU)" = 1 ]; then $(BIN)/python -m pip install --quiet -r requirements-gpu.txt; fi
	touch $@

demo: install
	$(BIN)/snakemake --cores $(CORES)

# ruff and snakefmt read their settings from pyproject.toml. To apply what they ask for:
#   ruff check --fix . && ruff format . && snakefmt .
# All three run, then the target fails if any did: one run names every finding.
lint: install
	@status=0; \
	$(BIN)/ruff check . || status=1; \
	$(BIN)/ruff format --check . || status=1; \
	$(BIN)/snakefmt --check . || status=1; \
	exit $$status

# Test tiers (pytest markers, pyproject.toml; tests/conftest.py requires exactly one per test):
# unit (in-process), integration (snakemake or a CLI end to end in subprocesses, the local Hub
# server), multiprocess (spawned workers), cluster (a throwaway Slurm cluster). `test` runs
# them all, each test once, on TEST_WORKERS pytest-xdist workers: most tests keep one core
# busy, the workflow runs two; each module stays on one worker with its fixtures
# (tests/conftest.py, in_worker_groups). TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
test: lint
	$(BIN)/python -m pytest -q -rs --durations=25 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder tests

# Meant to stay under two minutes on two cores: it names its ten slowest steps, so that a
# slow test is seen (and moved to another tier) when it comes.
test-fast: install
	$(BIN)/python -m pytest -q -rs --durations=10 -m unit tests

test-integration test-multiprocess test-cluster: test-%: install
	$(BIN)/python -m pytest -q -rs -m $* tests

# Before a grid spends GPU hours (docs/hub_and_preflight.md):
#   make preflight CONFIG=config/paper.yaml PROFILE=slurm
CONFIG ?=
PROFILE ?=
preflight: install
	$(BIN)/python -m workflow_scripts.preflight $(if $(CONFIG),--configfile $(CONFIG)) $(if $(PROFILE),--profile $(PROFILE))

# Progress of the running (or last) snakemake in this checkout, redrawn every WATCH seconds
# until it ends (docs/slurm.md, "Watching a run"):  make status   make status WATCH=30
# With several configs running in one checkout, EXPERIMENT picks the newest run of one:
#   make status EXPERIMENT=paper
WATCH ?= 10
EXPERIMENT ?=
status:
	$(BIN)/python -m workflow_scripts.operations.status --watch $(WATCH) $(if $(EXPERIMENT),--experiment $(EXPERIMENT))

# One GPU, minutes, no network needed (docs/benchmarks.md, "gpu-check"): the GPU tests, training
# tokens/s and MFU at real shapes, a torchrun/FSDP2 stop and resume, the GPU search against
# faiss, CTranslate2 on CUDA, measured peak memory beside the planner's; writes
# results/gpu_check/summary.md and summary.json. It runs with the environment's python (this
# checkout's .venv, else the machine's python3, as on a GPU image that brings torch); the
# wheels of .gpu-wheels/ (bash benchmarks/gpu_wheels.sh) are installed into a private folder.
GPU_PYTHON ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
gpu-check:
	@if ls .gpu-wheels/*.whl > /dev/null 2>&1; then \
		$(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-compile --upgrade --target .gpu-wheels/site .gpu-wheels/*.whl; fi
	PYTHONUNBUFFERED=1 PYTHONPATH=$(CURDIR)/.gpu-wheels/site:$(CURDIR) $(GPU_PYTHON) benchmarks/gpu_check.py

# The same parts at tiny shapes on the CPU (make test runs it: tests/test_gpu_check.py).
gpu-check-smoke: install
	$(BIN)/python benchmarks/gpu_check.py --cpu-smoke
