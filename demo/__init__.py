"""`make demo`: run a VMI YAML file through the real launcher without a cluster.

    python -m demo examples/vmi-demo.yaml      # from the root of a clone

A developer tool of the checkout, not part of either image: it runs the launcher from the
checkout with the test framework's stand-ins (`tests/framework`: the launcher as a child process,
virt-handler's two sides) and, without a real VMM, the simulated one of `tests/fakes/`, so it lives
beside `ch_launcher/` and is not in the wheel (an import-linter contract keeps ch_launcher and
admission from importing it). The tests never import it; they run it (`tests/functional/test_demo.py`).

The demo starts `ch-launcher` as a real process with every path in a temporary directory and
plays virt-handler: a Notify server on `<share-dir>/domain-notify-pipe.sock` that records (and
prints) every event, and a Cmd client on `<share-dir>/sockets/launcher-sock`. It walks the VM
through Sync -> Running, GetDomain, pause, unpause, GetDomainStats, graceful shutdown and
delete, printing the lifecycle as it happens (`run`).

The VMM is the real `cloud-hypervisor` when `CH_BINARY` is set and /dev/kvm is usable (firmware
from `CH_FIRMWARE_DIR`, default /usr/share/cloud-hypervisor; a bootable image for the first
containerDisk from `CH_DEMO_IMAGE`), else the simulated VMM of `tests/fakes/`, and the demo says
which. containerDisk images that do not exist are created as small sparse raw images.
"""
