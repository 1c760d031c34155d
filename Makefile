# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo test test-all bench lint clean

# torch first, pinned: 2.13.0 is a CPU build on this machine's disk; any other pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,onnx,ray,tensorboard,lora]'
	# Test peers without their dependencies: both require torchvision, which pulls another torch (or, pinned to
	# 2.13, does not import beside the CPU build); the tests load only their torch-only loss files.
	$(PY) -m pip install -q --no-deps open-clip-torch==3.3.0 lightly==1.6.0
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/contrastlab run demo --out runs/demo

test: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

test-all: $(STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --runslow

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

lint: $(STAMP)
	$(VENV)/bin/ruff check contrastlab tests benchmarks
	$(VENV)/bin/ruff format --check contrastlab tests benchmarks
	$(VENV)/bin/mypy contrastlab

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
