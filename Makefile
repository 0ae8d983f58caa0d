# The two set-up-and-run commands of README.md. Both create .venv on first use.
#   make demo   install, then run the embedded offline demo (snakemake --cores 2)
#   make test   install, then run the test suite
VENV ?= .venv
CORES ?= 2
BIN := $(abspath $(VENV))/bin
# Rules call `python -m workflow_scripts...`: the environment's python must come first.
export PATH := $(BIN):$(PATH)

.PHONY: demo test install

install: $(VENV)/.installed

# torch is installed first and pinned: an unpinned torch would pull several GB of CUDA wheels.
$(VENV)/.installed: requirements.txt requirements-test.txt
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -r requirements-test.txt
	touch $@

demo: install
	$(BIN)/snakemake --cores $(CORES)

test: install
	$(BIN)/python -m pytest -q -rs tests
