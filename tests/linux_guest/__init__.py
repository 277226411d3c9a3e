"""A Linux guest for the stories the tiny guest (tests/guest) cannot tell: ../shared/guest's
kernel with an initramfs of Debian's busybox-static and the project's own init (`rootfs/`).
`build.py` builds it; `console.py` names what it prints."""
