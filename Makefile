# The two commands of the README: `make demo` and `make test`. Both do all set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

# Debian packages the tests use (command:package): busybox (udhcpc plays the guest's DHCP client),
# qemu-utils (qemu-img checks the qcow2 overlays we write), iproute2 (network namespaces),
# binutils (assembles the tiny guest, tests/guest/), libcap2-bin (setcap: the pod sandbox gives its
# interpreter copy the file capability the launcher image has, tests/functional/pod_sandbox.py),
# swtpm (the launcher runs it for VMIs with a TPM), curl and openssl (../shared/k8s/up.sh makes the
# control plane's certificates and waits for etcd with them; tests/apiserver scrapes /metrics).
TEST_TOOLS := busybox:busybox qemu-img:qemu-utils ip:iproute2 as:binutils setcap:libcap2-bin swtpm:swtpm curl:curl openssl:openssl
# ... and the benchmarks: wrk (bench/admission.py's load generator).
BENCH_TOOLS := wrk:wrk

.PHONY: all demo test venv system-deps lint bench proto clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(STAMP)

# Installs missing Debian packages when running as root (CI does); otherwise says what is missing.
TOOLS ?= $(TEST_TOOLS)
system-deps:
	@missing=""; for pair in $(TOOLS); do tool=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$tool >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "not root: tests needing$$missing will say so"; fi; \
	fi

demo: $(STAMP)
	$(PY) -m demo examples/vmi-demo.yaml

# Static checks, each failing the run on any finding: the layering (.importlinter), types
# (mypy --strict over ch_launcher and admission, [tool.mypy]) and lint (ruff, [tool.ruff]).
# tests/ is not linted yet: it joins RUFF_PATHS once its pending edits have landed.
RUFF_PATHS := ch_launcher admission demo bench
lint: $(STAMP)
	$(VENV)/bin/lint-imports  # finds .importlinter itself
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff check $(RUFF_PATHS)

# pytest's exit code 5 (no tests collected) is non-zero, so make fails on it like on any failure.
# TEST_WORKERS: pytest-xdist workers (README "Testing"; 0 runs the suite in one process).
TEST_WORKERS ?= 4
test: $(STAMP) system-deps lint
	$(PY) -m pytest -n $(TEST_WORKERS)

bench: $(STAMP)
	$(MAKE) --no-print-directory system-deps TOOLS="$(BENCH_TOOLS)"
	for b in bench/*.py; do $(PY) $$b || exit 1; done

proto: $(STAMP)
	$(PY) ch_launcher/_proto/regenerate.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
