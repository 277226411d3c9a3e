"""ch-launcher: KubeVirt's per-VM launcher contract served over Cloud Hypervisor.

Layers, top to bottom (enforced by .importlinter): cli > server | notify | demo > manager >
lifecycle | prepare | console | stats | dhcp > convert > ch | kubevirt.
"""

HYPERVISOR_ANNOTATION = "kubevirt-ch.io/hypervisor"
HYPERVISOR_VALUE = "cloud-hypervisor"
