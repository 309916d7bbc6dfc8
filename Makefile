# Set-up and everyday commands. `make run` and `make test` each do all set-up on a fresh Debian/Ubuntu machine.
#   TORCH_SPEC   which torch to install first (default torch==2.13.0; e.g. TORCH_SPEC='torch==2.13.0+cu128'
#                with PIP_EXTRA_INDEX_URL for another build). A constraints file then pins it for every later pip step.
PYTHON     ?= python3
VENV       ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN        := $(VENV)/bin
STAMP      := $(VENV)/.installed
APT_PACKAGES := libgl1 libegl1 libxkbcommon0 libglib2.0-0 libfontconfig1 libdbus-1-3 \
                xvfb xauth libxkbcommon-x11-0 libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 \
                openssh-server openssh-client

.PHONY: run test test-fast test-timm sysdeps install bench lint clean

# pytest's settings for both suites: the 15 slowest tests at the end, each failure named as it happens
# (tests/conftest.py) and again in the summary (-ra in pyproject.toml).
PYTEST := QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q --durations=15 $(PYTEST_ARGS)
# Tests run in 2 processes (pytest-xdist, --dist worksteal) where the machine has 2 cores or more: it pays on
# 2 cores (benchmarks/README.md, "The test suite"). PYTEST_WORKERS=0 runs them in one process; the suite
# passes either way.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -ge 2 ] && echo 2 || echo 0)
XDIST := $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist worksteal,)

run: install
	$(BIN)/amp-console

# Everything but the slow tests: what to run while working.
test-fast: install
	@echo "== the fast tests (not slow): about 3 minutes on 2 idle cores"
	$(PYTEST) $(XDIST) -m "not xvfb and not slow"

# Every test, then the real-window smoke test. A failed step does not skip the ones
# after it; the target fails if any step failed.
test: install
	@echo "== the whole test suite, the install check: about 15-17 minutes on 2 idle cores, longer in proportion to the load"
	@failed=""; \
	$(PYTEST) $(XDIST) -m "not xvfb" || failed="$$failed pytest"; \
	if command -v xvfb-run >/dev/null 2>&1; then \
	  echo "== smoke test in a real X window (xvfb-run, QT_QPA_PLATFORM=xcb)"; \
	  QT_QPA_PLATFORM=xcb xvfb-run -a -s "-screen 0 1600x1000x24" $(BIN)/python -m pytest -q -p no:xdist -m xvfb tests/gui \
	    || [ $$? -eq 5 ] || failed="$$failed xvfb"; \
	else echo "xvfb-run not found: skipping the real-window smoke test"; fi; \
	if [ -n "$$failed" ]; then echo "== FAILED:$$failed"; exit 1; fi; echo "== all steps passed"

# The timm example (docs/examples/timm_resnet_task.py) in a venv of its own: timm imports torchvision, whose PyPI
# wheel loads only beside torch's own build of the same release (CUDA, about 5.5 GB; it runs on the CPU). CI runs it
# after `make test`; AMP_TEST_NO_SKIP=1 makes a package that cannot be imported a failure, not a skip.
TIMM_VENV ?= .venv-timm
TIMM_SPEC ?= torch==2.14.1 torchvision==0.29.1 timm==1.0.31
test-timm: sysdeps
	[ -x $(TIMM_VENV)/bin/python ] || $(PYTHON) -m venv $(TIMM_VENV)
	@echo "== installing $(TIMM_SPEC) into $(TIMM_VENV)"
	$(TIMM_VENV)/bin/pip install -q $(TIMM_SPEC)
	$(TIMM_VENV)/bin/pip show torch | sed -n 's/^Version: /torch==/p' > $(TIMM_VENV)/constraints.txt
	PIP_CONSTRAINT=$(TIMM_VENV)/constraints.txt $(TIMM_VENV)/bin/pip install -q -e . pytest pytest-timeout pytest-qt \
	  torchmetrics==1.9.0 scikit-learn "onnx>=1.17" "onnxscript>=0.5" "onnxruntime>=1.20"
	QT_QPA_PLATFORM=offscreen AMP_TEST_NO_SKIP=1 $(TIMM_VENV)/bin/python -m pytest -q -p no:xdist \
	  tests/test_four_models.py -k timm

# Qt's shared libraries (offscreen and X11), and OpenSSH (tests/test_remote_ssh.py starts an sshd on 127.0.0.1).
# Installs only what is missing; needs root or sudo.
sysdeps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

install: sysdeps $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	@echo "== installing torch and the app into $(VENV) (a few minutes on a fresh machine)"
	$(BIN)/pip install -q "$(TORCH_SPEC)" numpy
	$(BIN)/pip show torch | sed -n 's/^Version: /torch==/p' > $(VENV)/constraints.txt
	PIP_CONSTRAINT=$(VENV)/constraints.txt $(BIN)/pip install -q -e ".[test]"
	@$(BIN)/python -c "import torch; print('installed: torch', torch.__version__)"
	touch $(STAMP)

# ruff (lint and format), the import contracts (layers, no circles) and mypy on core/: CI runs it before the tests.
lint: install
	@failed=""; \
	echo "== ruff check"; $(BIN)/ruff check . || failed="$$failed ruff-check"; \
	echo "== ruff format --check"; $(BIN)/ruff format --check . || failed="$$failed ruff-format"; \
	echo "== import contracts (import-linter)"; $(BIN)/lint-imports || failed="$$failed lint-imports"; \
	echo "== mypy (core/)"; $(BIN)/mypy || failed="$$failed mypy"; \
	if [ -n "$$failed" ]; then echo "== lint FAILED:$$failed"; exit 1; fi; echo "== lint passed"

bench: install
	$(BIN)/python benchmarks/loop_overhead.py

clean:
	rm -rf $(VENV) $(TIMM_VENV) build *.egg-info
