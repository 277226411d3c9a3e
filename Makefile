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
# The real node of tests/cluster (../shared/k8s/node-up.sh): containerd and runc, the CNI plugins
# (containernetworking-plugins, found by path), iptables (kube-proxy), nftables (virt-handler's
# masquerade rules), xz-utils (../shared keeps its binaries xz-compressed); the images it runs are
# built with podman (`make images`) on a base image made with mmdebstrap. xorriso (what KubeVirt
# makes its ISOs with) and genisoimage's isoinfo read back the ISOs the launcher writes
# (tests/unit/prepare/test_iso.py; blkid, util-linux, is on every Debian). qemu-guest-agent: the
# real qemu-ga the simulated guest's agent is compared with (tests/real_agent.py).
TEST_TOOLS := busybox:busybox qemu-img:qemu-utils ip:iproute2 as:binutils setcap:libcap2-bin swtpm:swtpm curl:curl openssl:openssl \
	containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins iptables:iptables nft:nftables \
	xz:xz-utils podman:podman mmdebstrap:mmdebstrap xorriso:xorriso isoinfo:genisoimage /usr/sbin/qemu-ga:qemu-guest-agent
# ... and the benchmarks: wrk (bench/admission.py's load generator).
BENCH_TOOLS := wrk:wrk

.PHONY: all demo test test-linux-guest venv system-deps lint bench proto clean images

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
# (mypy --strict over ch_launcher, admission and tests, [tool.mypy]) and lint (ruff, [tool.ruff]).
RUFF_PATHS := ch_launcher admission demo bench tests
lint: $(STAMP)
	$(VENV)/bin/lint-imports  # finds .importlinter itself
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff check $(RUFF_PATHS)

# pytest's exit code 5 (no tests collected) is non-zero, so make fails on it like on any failure.
# TEST_WORKERS: pytest-xdist workers (README "Testing"; 0 runs the suite in one process).
# The stories that boot ../shared's Linux guest (marker linux_guest, left out by pyproject.toml's
# addopts) run after the rest, on the machine the rest left quiet: the guest's kernel code is
# emulated here, and a boot that takes a minute or two then takes 10-30 at the rest's load
# (docs/testing.md). `make test-linux-guest` runs them alone.
TEST_WORKERS ?= 4
test: $(STAMP) system-deps lint
	$(PY) -m pytest -n $(TEST_WORKERS)
	$(PY) -m pytest -n 2 -m linux_guest

test-linux-guest: $(STAMP) system-deps
	$(PY) -m pytest -n 2 -m linux_guest

bench: $(STAMP)
	$(MAKE) --no-print-directory system-deps TOOLS="$(BENCH_TOOLS)"
	for b in bench/*.py; do $(PY) $$b || exit 1; done

# The launcher and admission images of Containerfile, built with podman, tagged as addon_manifests/
# refers to them (the tags of the Containerfile's header) and written as OCI archives to IMAGES_DIR.
# Without the internet: PYTHON_IMAGE=<a local image with python3 and its venv module> and
# VMM_ASSETS=<a directory holding cloud-hypervisor, hypervisor-fw and CLOUDHV.fd>, copied in instead
# of downloaded. BUILD_CA: the CA bundle pip trusts in the build (default: the machine's own, for
# TLS-intercepting proxies; empty: pip's own). PODMAN: e.g. `podman --root DIR` for a storage of its own.
PODMAN ?= podman
IMAGES_DIR ?= build/images
PYTHON_IMAGE ?=
VMM_ASSETS ?=
BUILD_CA ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
# the tag of a Containerfile target, from the build commands in its header
image_tag = $(shell sed -n 's/.*--target $(1) *-t \([^ ]*\) .*/\1/p' Containerfile)
comma := ,
IMAGE_BUILD_ARGS = $(if $(PYTHON_IMAGE),--build-arg PYTHON_IMAGE=$(PYTHON_IMAGE)) \
	$(if $(VMM_ASSETS),--build-context vmm-assets=$(abspath $(VMM_ASSETS))) \
	$(if $(BUILD_CA),--secret id=build-ca$(comma)src=$(abspath $(BUILD_CA)))

images:
	@command -v $(firstword $(PODMAN)) >/dev/null || { echo "make images needs podman (Debian package podman)" >&2; exit 2; }
	mkdir -p $(IMAGES_DIR)
	$(PODMAN) build --target launcher -t $(call image_tag,launcher) $(IMAGE_BUILD_ARGS) -f Containerfile .
	rm -f $(IMAGES_DIR)/ch-launcher.oci.tar
	$(PODMAN) save --format oci-archive -o $(IMAGES_DIR)/ch-launcher.oci.tar $(call image_tag,launcher)
	$(PODMAN) build --target admission -t $(call image_tag,admission) $(IMAGE_BUILD_ARGS) -f Containerfile .
	rm -f $(IMAGES_DIR)/ch-admission.oci.tar
	$(PODMAN) save --format oci-archive -o $(IMAGES_DIR)/ch-admission.oci.tar $(call image_tag,admission)

proto: $(STAMP)
	$(PY) ch_launcher/_proto/regenerate.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache
