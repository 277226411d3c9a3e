"""`make demo`: run a VMI YAML file through the real launcher without a cluster, and the
virt-handler stand-in the functional tests and the benchmark reuse.

    python -m demo examples/vmi-demo.yaml      # from the root of a clone

A developer tool of the checkout, not part of either image: it runs the launcher from the
checkout and the simulated VMM from `tests/fakes/`, so it lives beside `ch_launcher/` and
is not in the wheel (an import-linter contract keeps ch_launcher and admission from
importing it).

The demo starts `ch-launcher` as a real process with every path in a temporary directory and
plays virt-handler: a Notify server on `<share-dir>/domain-notify-pipe.sock` that records (and
prints) every event, and a Cmd client on `<share-dir>/sockets/launcher-sock`. It walks the VM
through Sync -> Running, GetDomain, pause, unpause, GetDomainStats, graceful shutdown and
delete, printing the lifecycle as it happens.

The VMM is the real `cloud-hypervisor` when `CH_BINARY` is set and /dev/kvm is usable (firmware
from `CH_FIRMWARE_DIR`, default /usr/share/cloud-hypervisor; a bootable image for the first
containerDisk from `CH_DEMO_IMAGE`), else the simulated VMM of `tests/fakes/`, and the demo says
which. containerDisk images that do not exist are created as small sparse raw images.

Modules: `launcher` (`LauncherLayout`, the directories; `LauncherProcess`: start, wait until
ready, signal, stop with every descendant), `virt_handler` (`NotifyRecorder`, virt-handler's
Notify side; `CmdClient`, its Cmd side with its deadlines), `run` (the demo). The stand-in
pieces are re-exported here.
"""

from demo.launcher import FAKE_CH, REPO, LauncherLayout, LauncherProcess, container_disk_images, fake_firmware
from demo.virt_handler import DEADLINES, CmdClient, CommandError, DomainEvent, NotifyRecorder

__all__ = ["DEADLINES", "FAKE_CH", "REPO", "CmdClient", "CommandError", "DomainEvent", "LauncherLayout",
           "LauncherProcess", "NotifyRecorder", "container_disk_images", "fake_firmware"]
