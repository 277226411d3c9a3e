"""ch-launcher: KubeVirt's per-VM launcher contract served over Cloud Hypervisor.

Its layers (docs/architecture.md) are `.importlinter`'s contracts, which `make lint` checks. The
virt-handler stand-in of `make demo` is not part of this package (demo/ and tests/framework/ in
the checkout).
"""
