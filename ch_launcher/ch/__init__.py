"""Cloud Hypervisor vocabulary and I/O: VmConfig models (pure), REST client, event monitor, process."""
