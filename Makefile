# Two entry points: `make app` starts the lab, `make test` runs the test suite.
# Both install what they need first; a second run installs nothing new.

PYTHON ?= python3
PIP = $(PYTHON) -m pip

.PHONY: install install-test app test lint

# A CPU machine gets the CPU build of PyTorch that the lab is tested with; a machine with an
# NVIDIA driver gets the default (CUDA) build. An already installed torch is kept either way.
install:
	@$(PYTHON) -c "import torch" 2>/dev/null || \
		if command -v nvidia-smi >/dev/null; then $(PIP) install torch; \
		else $(PIP) install "torch==2.13.0"; fi
	$(PIP) install -e .

install-test: install
	$(PIP) install -e ".[test]"
	@command -v chromium >/dev/null || \
		(apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium)

app: install
	$(PYTHON) app.py

test: install-test
	$(PYTHON) -m pytest

lint:
	ruff check .
