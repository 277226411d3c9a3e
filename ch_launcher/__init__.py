"""ch-launcher: KubeVirt's per-VM launcher contract served over Cloud Hypervisor.

Layers, top to bottom (enforced by .importlinter): cli | freezer > server | notify > manager >
lifecycle | prepare | console | stats | dhcp > convert > ch | kubevirt. The virt-handler
stand-in of `make demo` is not part of this package (demo/ in the checkout).
"""

HYPERVISOR_ANNOTATION = "kubevirt-ch.io/hypervisor"
HYPERVISOR_VALUE = "cloud-hypervisor"
