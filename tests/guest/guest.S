/*
 * The tiny guest: a few hundred instructions that run at once even on PVM, where a Linux guest
 * does not boot. Loaded by cloud-hypervisor as its firmware or kernel payload (an ELF with a PVH
 * entry note), it prints a marker on COM1, echoes what it reads there, acts on the commands
 * below and on the ACPI power button, and otherwise idles in `hlt` with interrupts on (no
 * polling: it costs no CPU while nothing happens). It also acknowledges hotplug as a Linux guest
 * does (below). On PVM it runs under KVM's instruction emulator, which limits it to
 * instructions the emulator knows (no iret: see `idle`).
 *
 * Console protocol (COM1). At every boot it prints
 *     KCH-GUEST-READY
 * and from then on echoes every byte it reads, except '~' and the letter after it, a command.
 * Each command prints its acknowledgement line first, then acts:
 *     ~p  KCH-GUEST-POWEROFF         powers off (ACPI S5: 0x34 to port 0x600; the VMM exits)
 *     ~r  KCH-GUEST-REBOOT           reboots (1 to port 0x600; the VMM resets the VM in-process)
 *     ~t  KCH-GUEST-TRIPLE-FAULT     triple-faults (an empty IDT, then ud2; the VMM resets the VM)
 *     ~k  KCH-GUEST-PANIC            signals a panic on the pvpanic PCI device (1 to its BAR0) and
 *                                    keeps running; KCH-GUEST-NO-PVPANIC when the VM has none
 *     ~i  KCH-GUEST-IGNORING-ACPI    ignores the power button from now on (until the next boot)
 *     ~a  KCH-GUEST-HONOURING-ACPI   honours it again
 *     ~x  KCH-GUEST-IGNORING-EJECT   ignores hot-unplug requests (PCI devices, vCPUs) from now on
 *                                    (until the next boot): it acknowledges them but never ejects
 *     ~y  KCH-GUEST-HONOURING-EJECT  ejects again what is asked from now on
 *     ~f  KCH-GUEST-FLOODING         prints KCH-GUEST-FLOOD lines without pause (80 bytes each),
 *                                    reading COM1 between lines, until ~f again: then
 *                                    KCH-GUEST-FLOOD-STOPPED and it idles (other commands act
 *                                    meanwhile; the power button waits until the flood ends)
 *     ~h  KCH-GUEST-HELLO            nothing else: tells a client the guest is up and hears it
 *     ~w  KCH-GUEST-DISK-WRITTEN <segment>:<slot>, for each virtio-blk disk, once it has written
 *                                    DISK_MARK ("KCH-GUEST-DISK-MARK\n", then zeros) into its first
 *                                    4 KiB; KCH-GUEST-DISK-READ-ONLY <segment>:<slot> for a disk
 *                                    that offers VIRTIO_BLK_F_RO (nothing written)
 *     ~d  KCH-GUEST-DISK-MARKED <segment>:<slot> or KCH-GUEST-DISK-UNMARKED <segment>:<slot>, for
 *                                    each virtio-blk disk, as its first 4 KiB start with
 *                                    DISK_MARK or not
 *                                    (both: KCH-GUEST-DISK-ERROR <segment>:<slot> for a disk that
 *                                    failed the request or never answered; KCH-GUEST-NO-DISKS
 *                                    without any; then KCH-GUEST-DISKS-DONE)
 *     ~e  KCH-GUEST-EMULATION-FAILURE  jumps to an address that is not RAM, so the vCPU fails
 *                                    (KVM cannot fetch instructions from MMIO: KVM_EXIT_INTERNAL_ERROR,
 *                                    on PVM and on VT-x/SVM alike; the VMM then stops the VM)
 *     ~~  echoes one '~'; any other letter prints KCH-GUEST-UNKNOWN-COMMAND
 * The power button prints KCH-GUEST-POWER-BUTTON and powers off, or, while ignoring ACPI,
 * prints KCH-GUEST-POWER-BUTTON-IGNORED and carries on. Without a GED in the DSDT it prints
 * KCH-GUEST-NO-GED once at boot, before the marker. An unexpected CPU exception prints
 * KCH-GUEST-EXCEPTION <vector> and halts.
 *
 * Hotplug, as a Linux guest's ACPI does it on Cloud Hypervisor (the DSDT's methods, done here
 * directly), on the GED's notifications:
 *   PCI (GED bit 2, \_SB_.PHPR.PSCN -> PCNT of each segment): for each PCI segment, select it
 *     (PSEG), read the slots added (PCIU) and those to eject (PCID; reads clear them). An added
 *     slot prints `KCH-GUEST-PCI-ADDED <segment>:<slot>` (Linux would probe the device); a slot to
 *     eject prints `KCH-GUEST-PCI-EJECT <segment>:<slot>` and is ejected as Linux's acpiphp does
 *     through the slot's _EJ0 (-> PCEJ: PSEG, then its bit to B0EJ), after which the VMM drops
 *     the device and reports `vm:device-removed`; while ignoring ejects it prints
 *     `KCH-GUEST-PCI-EJECT-IGNORED <segment>:<slot>` instead.
 *   vCPUs (GED bit 0, \_SB_.CPUS.CSCN): for each vCPU (as many as the MADT lists), select it
 *     (CSEL) and read its status: one being inserted is acknowledged (CINS) and prints
 *     `KCH-GUEST-CPU-ADDED <id>` (Linux would start it; here it stays waiting for its SIPI); one
 *     being removed is acknowledged (CRMV), prints `KCH-GUEST-CPU-EJECT <id>` and is ejected as
 *     Linux does once it has offlined it (its _EJ0 -> CEJ0), after which the VMM stops its thread
 *     and accepts the next resize (until then it answers 429); while ignoring ejects it prints
 *     `KCH-GUEST-CPU-EJECT-IGNORED <id>` instead, and the removal stays pending.
 *
 * Boot state (cloud-hypervisor arch/src/x86_64/regs.rs@v53, PVH): 32-bit protected mode, flat
 * segments, paging off, interrupts off, %ebx = hvm_start_info (rsdp_paddr at +32); no stack.
 * Devices (cloud-hypervisor v53): COM1 is a 16550 at 0x3f8 on IOAPIC pin 4 (LSR at +5, bit 0 =
 * data ready; IER at +1); port 0x600 is the ACPI shutdown/reset device (devices/src/acpi.rs:
 * 0x34 = SLP_TYP 5 << 2 | SLP_EN powers off, 1 resets); the IOAPIC is at 0xfec00000, the local
 * APIC at 0xfee00000 (xAPIC mode below 255 vCPUs, arch/src/x86_64/layout.rs); the ACPI GED's
 * MMIO address and GSI are allocated at run time, so they are read from the DSDT: _SB_.GEC_'s
 * QWord memory resource and _SB_.GED_'s extended interrupt resource (acpi.rs AcpiGedDevice);
 * reading the GED's byte returns the pending events and clears them: bit 0 vCPUs, bit 2 PCI
 * devices, bit 3 power button (devices/src/lib.rs AcpiNotificationFlags); pvpanic is PCI
 * 1b36:0011 with a 32-bit memory BAR0 (devices/src/pvpanic.rs), found through the 0xcf8/0xcfc
 * ports. The PCI hotplug controller (vmm/src/device_manager.rs: \_SB_.PHPR, dword registers PCIU
 * +0, PCID +4, B0EJ +8, PSEG +12) and the CPU hotplug controller (vmm/src/cpu.rs: \_SB_.PRES,
 * CSEL dword at +0, a status byte at +4: bit 1 inserting, bit 2 removing, bit 3 eject) are also
 * MMIO allocated at run time: each device's QWord memory resource in the DSDT (found by its
 * definition, `_SB_.PHPR` after a DualNamePrefix: references use three-part names). The vCPUs
 * are the MADT's local (x2)APIC entries (one per possible vCPU), the PCI segments the MCFG's
 * entries (vmm/src/acpi.rs).
 *
 * Paging. Cloud Hypervisor allocates these platform devices (GED and hotplug controllers) in
 * the last MiB of the guest's physical address space (vmm/src/memory_manager.rs: 1 << phys_bits
 * less PLATFORM_DEVICE_AREA_SIZE), far above 4 GiB, where a 32-bit guest without paging cannot
 * reach (its accesses to the truncated address hit nothing: Cloud Hypervisor logs "Guest MMIO
 * read from unregistered address"). So the guest turns on IA-32e paging (PVM refuses 32-bit PAE
 * paging with a #GP on CR0.PG) with 2 MiB pages: the low 4 GiB mapped to themselves, and each
 * platform device through a window at 2 GiB (`mmio_window`). Its code runs on in compatibility
 * mode (a 32-bit code segment); interrupt gates are 64-bit, so each handler is entered through a
 * 64-bit stub that far-returns to it.
 *
 * Disks. Each command finds the virtio-blk devices (1af4:1042, modern virtio-pci: virtio-devices/
 * src/transport/pci_device.rs@v53) on bus 0 at the time, so hot-added ones too; for each it reads
 * the virtio capabilities (common and notify configuration, their BAR and offsets), maps the BAR
 * (64-bit, 8 MiB aligned, above RAM) through an MMIO window, and drives the device as a driver
 * does: reset, ACKNOWLEDGE | DRIVER, VIRTIO_F_VERSION_1 only, FEATURES_OK, queue 0 with 4
 * entries (no MSI-X vector, no interrupts: the guest polls the used ring), DRIVER_OK; then one
 * request of three descriptors (header, 4 KiB at sector 0, status) and a reset again. The VMM
 * does the I/O on the image or device it opened (raw, qcow2, a block device), so what was written
 * is on the disk as the host sees it.
 */
    .section .note.pvh, "a", @note
    .balign 4
    .long 4                     /* namesz */
    .long 4                     /* descsz */
    .long 18                    /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .long _start

    .set COM1, 0x3f8
    .set COM1_IER, 0x3f9
    .set COM1_MCR, 0x3fc
    .set COM1_LSR, 0x3fd
    .set COM1_GSI, 4
    .set ACPI_SLEEP_CONTROL, 0x600
    .set S5, 0x34
    .set RESET, 1
    .set IOAPIC, 0xfec00000
    .set LAPIC, 0xfee00000
    .set LAPIC_ID, 0x20
    .set LAPIC_TPR, 0x80
    .set LAPIC_EOI, 0xb0
    .set LAPIC_SVR, 0xf0
    .set VEC_SERIAL, 0x24
    .set VEC_GED, 0x30
    .set VEC_SPURIOUS, 0xff
    .set GED_CPU, 1
    .set GED_PCI, 4
    .set GED_POWER_BUTTON, 8
    .set PHPR_PCIU, 0
    .set PHPR_PCID, 4
    .set PHPR_B0EJ, 8
    .set PHPR_PSEG, 12
    .set PRES_CSEL, 0
    .set PRES_STATUS, 4
    .set CPU_INSERTING, 2
    .set CPU_REMOVING, 4
    .set CPU_EJECT, 8
    .set PCI_ADDRESS, 0xcf8
    .set PCI_DATA, 0xcfc
    .set PVPANIC_ID, 0x00111b36   /* device 0x0011 << 16 | vendor 0x1b36 */
    .set PVPANIC_PANICKED, 1
    .set MMIO_WINDOWS, 0x80000000  /* virtual: 2 GiB up */
    .set MMIO_WINDOW_COUNT, 32
    .set VIRTIO_BLK_ID, 0x10421af4  /* device 0x1042 (0x1040 + virtio type 2) << 16 | vendor 0x1af4 */
    .set VIRTIO_CAP_VENDOR, 0x09
    .set VIRTIO_CFG_COMMON, 1
    .set VIRTIO_CFG_NOTIFY, 2
    .set VQ_DEVICE_FEATURE_SELECT, 0x00   /* the common configuration's registers */
    .set VQ_DEVICE_FEATURE, 0x04
    .set VQ_DRIVER_FEATURE_SELECT, 0x08
    .set VQ_DRIVER_FEATURE, 0x0c
    .set VQ_STATUS, 0x14
    .set VQ_QUEUE_SELECT, 0x16
    .set VQ_QUEUE_SIZE, 0x18
    .set VQ_QUEUE_MSIX_VECTOR, 0x1a
    .set VQ_QUEUE_ENABLE, 0x1c
    .set VQ_QUEUE_NOTIFY_OFF, 0x1e
    .set VQ_QUEUE_DESC, 0x20
    .set VQ_QUEUE_AVAIL, 0x28
    .set VQ_QUEUE_USED, 0x30
    .set STATUS_ACKNOWLEDGE, 1
    .set STATUS_DRIVER, 2
    .set STATUS_DRIVER_OK, 4
    .set STATUS_FEATURES_OK, 8
    .set VIRTIO_BLK_F_RO, 0x20       /* feature bit 5 */
    .set VIRTIO_BLK_T_IN, 0
    .set VIRTIO_BLK_T_OUT, 1
    .set VRING_DESC_F_NEXT, 1
    .set VRING_DESC_F_WRITE, 2
    .set VRING_AVAIL_F_NO_INTERRUPT, 1
    .set QUEUE_ENTRIES, 4
    .set DISK_BYTES, 4096            /* 8 sectors: aligned for a VMM that opened the image O_DIRECT */
    .set DISK_POLLS, 0x4000000       /* how long the guest polls the used ring before giving up */
    .set CODE, 0x08
    .set CODE64, 0x18
    .set DATA, 0x10

    .text
    .code32
    .globl _start
_start:
    cli
    cld
    mov %ebx, %ebp              /* hvm_start_info, kept while .bss is cleared */
    lgdt gdt_desc
    ljmp $CODE, $1f
1:  mov $DATA, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %ax, %fs
    mov %ax, %gs
    mov $__bss_start, %edi      /* a reset reloads the image, not necessarily zeroed memory */
    mov $__bss_end, %ecx
    sub %edi, %ecx
    xor %eax, %eax
    rep stosb
    mov $stack_top, %esp
    mov %ebp, start_info
    call map_low
    call find_devices
    call paging_on
    call setup_idt
    call setup_apics
    call setup_uart
    mov $msg_ready, %esi
    call puts
    call serial_poll            /* bytes typed before interrupts were on */
/* idle: the only place interrupts are on. A handler never returns here with iret (KVM's
   instruction emulator, which runs this guest on PVM, emulates iret in real mode only: an iret
   here stops the VM with KVM_EXIT_INTERNAL_ERROR); it ends with `jmp idle` instead, which
   drops the interrupted frame: nothing but this loop is ever interrupted. */
idle:
    mov $stack_top, %esp
    sti
    hlt
    jmp idle

/* --- interrupts -------------------------------------------------------------------------- */

/* setup_idt: 256 64-bit interrupt gates (IA-32e mode has no others): exceptions, COM1, GED,
   spurious, and EOI for the rest. Each gate enters a 64-bit stub (a gate's code segment must be
   64-bit) that goes on to the handler in compatibility mode with a far return. */
setup_idt:
    mov $idt, %edi
    xor %ecx, %ecx
1:  mov $stub_default, %eax
    cmp $32, %ecx
    jae 2f
    mov %ecx, %eax              /* exception N: its stub, 32 bytes each */
    shl $5, %eax
    add $exception_stubs, %eax
2:  cmp $VEC_SERIAL, %ecx
    jne 3f
    mov $stub_serial, %eax
3:  cmp $VEC_GED, %ecx
    jne 4f
    mov $stub_ged, %eax
4:  cmp $VEC_SPURIOUS, %ecx
    jne 5f
    mov $stub_spurious, %eax
5:  mov %ax, (%edi)             /* offset 15:0 */
    movw $CODE64, 2(%edi)       /* selector */
    movw $0x8e00, 4(%edi)       /* present, DPL 0, 64-bit interrupt gate, no IST */
    shr $16, %eax
    mov %ax, 6(%edi)            /* offset 31:16 */
    movl $0, 8(%edi)            /* offset 63:32 */
    movl $0, 12(%edi)
    add $16, %edi
    inc %ecx
    cmp $256, %ecx
    jb 1b
    lidt idt_desc
    ret

/* The 64-bit stubs: to the handler, in compatibility mode (CS = CODE), by a far return. */
    .code64
    .macro to_compat handler
    pushq $CODE
    pushq $\handler
    lretq
    .endm
stub_serial:   to_compat isr_serial
stub_ged:      to_compat isr_ged
stub_default:  to_compat isr_default
stub_spurious: to_compat isr_spurious
/* One per exception vector: it notes the vector for isr_exception. */
    .balign 32
exception_stubs:
    .set vector, 0
    .rept 32
    .balign 32
    movb $vector, exception_vector
    to_compat isr_exception
    .set vector, vector + 1
    .endr
    .code32

/* setup_apics: local APIC on (spurious vector 0xff), COM1 and the GED routed to it, edge. */
setup_apics:
    mov $LAPIC, %ebx
    movl $0, LAPIC_TPR(%ebx)
    movl $(0x100 | VEC_SPURIOUS), LAPIC_SVR(%ebx)
    mov LAPIC_ID(%ebx), %edx
    shr $24, %edx               /* our APIC id: the destination */
    mov $COM1_GSI, %eax
    mov $VEC_SERIAL, %ecx
    call route
    mov ged_irq, %eax
    test %eax, %eax
    jz 1f
    mov $VEC_GED, %ecx
    call route
1:  ret

/* route: IOAPIC pin %eax -> vector %ecx on APIC id %edx: fixed, physical, active high, edge,
   unmasked. */
route:
    mov $IOAPIC, %ebx
    lea 0x11(,%eax,2), %eax     /* redirection entry, high dword */
    mov %eax, (%ebx)            /* IOREGSEL */
    mov %edx, %esi
    shl $24, %esi
    mov %esi, 0x10(%ebx)        /* IOWIN */
    dec %eax                    /* low dword */
    mov %eax, (%ebx)
    mov %ecx, 0x10(%ebx)
    ret

/* setup_uart: COM1 interrupts when a byte arrives (IER bit 0; MCR OUT2 for good measure). */
setup_uart:
    mov $COM1_MCR, %dx
    mov $0x0b, %al
    out %al, %dx
    mov $COM1_IER, %dx
    mov $1, %al
    out %al, %dx
    ret

eoi:
    movl $0, LAPIC + LAPIC_EOI
    ret

isr_serial:
    call serial_poll
    call eoi
    jmp idle

isr_ged:
    mov ged_addr, %ebx
    movb (%ebx), %al            /* the pending events; reading clears them */
    movb %al, ged_events
    test $GED_CPU, %al
    jz 1f
    call cpu_scan
1:  testb $GED_PCI, ged_events
    jz 2f
    call pci_scan
2:  testb $GED_POWER_BUTTON, ged_events
    jz 4f
    cmpb $0, ignore_acpi
    jne 3f
    mov $msg_power_button, %esi
    call puts
    jmp poweroff
3:  mov $msg_power_button_ignored, %esi
    call puts
4:  call eoi
    jmp idle

isr_default:
    call eoi
    jmp idle

isr_spurious:                   /* no EOI for the spurious vector */
    jmp idle

isr_exception:
    mov $msg_exception, %esi
    call puts
    movzbl exception_vector, %eax
    call putdec
    mov $msg_crlf, %esi
    call puts
halt:
    cli
    hlt
    jmp halt

/* --- the console ------------------------------------------------------------------------- */

/* serial_poll: handles every byte COM1 holds. */
serial_poll:
1:  mov $COM1_LSR, %dx
    in %dx, %al
    test $1, %al
    jz 2f
    mov $COM1, %dx
    in %dx, %al
    call handle_byte
    jmp 1b
2:  ret

/* handle_byte: %al, from COM1: echoed, or '~' and a command letter. */
handle_byte:
    cmpb $0, tilde
    jne command
    cmp $'~', %al
    jne echo
    movb $1, tilde
    ret
echo:
    mov $COM1, %dx
    out %al, %dx
    ret

command:
    movb $0, tilde
    cmp $'~', %al
    je echo
    cmp $'p', %al
    je cmd_poweroff
    cmp $'r', %al
    je cmd_reboot
    cmp $'t', %al
    je cmd_triple_fault
    cmp $'k', %al
    je cmd_panic
    cmp $'i', %al
    je cmd_ignore_acpi
    cmp $'a', %al
    je cmd_honour_acpi
    cmp $'h', %al
    je cmd_hello
    cmp $'e', %al
    je cmd_emulation_failure
    cmp $'x', %al
    je cmd_ignore_eject
    cmp $'y', %al
    je cmd_honour_eject
    cmp $'f', %al
    je cmd_flood
    cmp $'w', %al
    je cmd_disk_write
    cmp $'d', %al
    je cmd_disk_read
    mov $msg_unknown, %esi
    jmp puts

cmd_poweroff:
    mov $msg_poweroff, %esi
    call puts
poweroff:
    mov $ACPI_SLEEP_CONTROL, %dx
    mov $S5, %al
    out %al, %dx                /* the VMM stops the vCPUs before this returns */
    jmp halt

cmd_reboot:
    mov $msg_reboot, %esi
    call puts
    mov $ACPI_SLEEP_CONTROL, %dx
    mov $RESET, %al
    out %al, %dx
    jmp halt

cmd_triple_fault:
    mov $msg_triple_fault, %esi
    call puts
    lidt no_idt                 /* #UD cannot be delivered, nor the #DF after it: shutdown */
    ud2

cmd_panic:
    call find_pvpanic
    test %ebx, %ebx
    jz 1f
    mov $msg_panic, %esi
    call puts
    movb $PVPANIC_PANICKED, (%ebx)
    ret
1:  mov $msg_no_pvpanic, %esi
    jmp puts

cmd_ignore_acpi:
    movb $1, ignore_acpi
    mov $msg_ignoring_acpi, %esi
    jmp puts

cmd_honour_acpi:
    movb $0, ignore_acpi
    mov $msg_honouring_acpi, %esi
    jmp puts

cmd_hello:
    mov $msg_hello, %esi
    jmp puts

/* cmd_flood: a console flood. Started, it loops here with interrupts off (reached from
   isr_serial or from the boot's serial_poll), polling COM1 between lines; a second ~f, read by
   that poll, clears `flooding` and the loop ends like a handler: EOI, then idle. */
cmd_flood:
    cmpb $0, flooding
    jne 2f
    movb $1, flooding
    mov $msg_flooding, %esi
    call puts
1:  mov $msg_flood_line, %esi
    call puts
    call serial_poll
    cmpb $0, flooding
    jne 1b
    call eoi
    jmp idle
2:  movb $0, flooding
    mov $msg_flood_stopped, %esi
    jmp puts

/* The 32-bit device area (0xc0000000 + 640 MiB: PCI BARs, never RAM; cloud-hypervisor
   arch/src/x86_64/layout.rs@v53 MEM_32BIT_DEVICES_START): KVM's emulator cannot fetch an
   instruction there and, the guest being at CPL 0, exits with an emulation failure
   (KVM_EXIT_INTERNAL_ERROR), which cloud-hypervisor treats as a vCPU error. With paging on,
   that address is still itself: map_low maps the low 4 GiB to themselves (the MMIO windows
   are at 2 GiB). */
cmd_emulation_failure:
    mov $msg_emulation_failure, %esi
    call puts
    mov $0xd0000000, %eax
    jmp *%eax

cmd_ignore_eject:
    movb $1, ignore_eject
    mov $msg_ignoring_eject, %esi
    jmp puts

cmd_honour_eject:
    movb $0, ignore_eject
    mov $msg_honouring_eject, %esi
    jmp puts

/* --- disks: virtio-blk (see the header) ------------------------------------------------- */

cmd_disk_write:
    movb $1, disk_writing
    jmp disks
cmd_disk_read:
    movb $0, disk_writing
/* disks: the request on every virtio-blk device of bus 0 (slot order), a line for each. */
disks:
    movl $0, cur_seg
    movl $0, cur_slot
    movl $0, disks_found
1:  mov cur_slot, %eax
    shl $11, %eax
    or $0x80000000, %eax        /* enable | bus 0 | device | function 0 | register 0 */
    mov %eax, pci_base
    call pci_read
    cmp $VIRTIO_BLK_ID, %eax
    jne 2f
    incl disks_found
    call disk_request
2:  incl cur_slot
    cmpl $32, cur_slot
    jb 1b
    cmpl $0, disks_found
    jne 3f
    mov $msg_no_disks, %esi
    call puts
3:  mov $msg_disks_done, %esi
    jmp puts

/* pci_read: %eax = the configuration dword at address %eax. Clobbers %dx. */
pci_read:
    mov $PCI_ADDRESS, %dx
    out %eax, %dx
    mov $PCI_DATA, %dx
    in %dx, %eax
    ret

/* pci_write: the configuration dword at address %eax = %ebx. Clobbers %dx. */
pci_write:
    mov $PCI_ADDRESS, %dx
    out %eax, %dx
    mov $PCI_DATA, %dx
    mov %ebx, %eax
    out %eax, %dx
    ret

/* disk_request: the device at pci_base: its registers found and mapped, the request made, the
   line printed, the device reset. */
disk_request:
    mov pci_base, %eax          /* memory space and bus mastering on */
    add $0x04, %eax
    call pci_read
    or $0x6, %eax
    mov %eax, %ebx
    mov pci_base, %eax
    add $0x04, %eax
    call pci_write
    call virtio_caps
    test %eax, %eax
    jz disk_error
    mov vq_common, %esi         /* reset, then ACKNOWLEDGE | DRIVER */
    movb $0, VQ_STATUS(%esi)
    movb $STATUS_ACKNOWLEDGE, VQ_STATUS(%esi)
    movb $(STATUS_ACKNOWLEDGE | STATUS_DRIVER), VQ_STATUS(%esi)
    movl $0, VQ_DEVICE_FEATURE_SELECT(%esi)
    mov VQ_DEVICE_FEATURE(%esi), %eax
    mov %eax, disk_features
    movl $1, VQ_DRIVER_FEATURE_SELECT(%esi)
    movl $1, VQ_DRIVER_FEATURE(%esi)          /* VIRTIO_F_VERSION_1 (bit 32) */
    movl $0, VQ_DRIVER_FEATURE_SELECT(%esi)
    movl $0, VQ_DRIVER_FEATURE(%esi)
    movb $(STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK), VQ_STATUS(%esi)
    testb $STATUS_FEATURES_OK, VQ_STATUS(%esi)
    jz disk_error
    cmpb $0, disk_writing
    je 1f
    testl $VIRTIO_BLK_F_RO, disk_features
    jz 1f
    movb $0, VQ_STATUS(%esi)
    mov $msg_disk_read_only, %esi
    jmp put_slot
1:  mov $vq, %edi               /* a fresh queue */
    mov $(vq_end - vq), %ecx
    xor %eax, %eax
    rep stosb
    movw $0, VQ_QUEUE_SELECT(%esi)
    cmpw $QUEUE_ENTRIES, VQ_QUEUE_SIZE(%esi)
    jb disk_error
    movw $QUEUE_ENTRIES, VQ_QUEUE_SIZE(%esi)
    movw $0xffff, VQ_QUEUE_MSIX_VECTOR(%esi)  /* VIRTQ_MSI_NO_VECTOR */
    movl $vq_desc, VQ_QUEUE_DESC(%esi)
    movl $0, VQ_QUEUE_DESC + 4(%esi)
    movl $vq_avail, VQ_QUEUE_AVAIL(%esi)
    movl $0, VQ_QUEUE_AVAIL + 4(%esi)
    movl $vq_used, VQ_QUEUE_USED(%esi)
    movl $0, VQ_QUEUE_USED + 4(%esi)
    movzwl VQ_QUEUE_NOTIFY_OFF(%esi), %eax
    imul vq_notify_mult, %eax
    add %eax, vq_notify
    movw $1, VQ_QUEUE_ENABLE(%esi)
    movb $(STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK | STATUS_DRIVER_OK), VQ_STATUS(%esi)
    /* the request: header, data, status */
    mov $disk_buf, %edi
    mov $DISK_BYTES, %ecx
    xor %eax, %eax
    rep stosb
    movl $VIRTIO_BLK_T_IN, disk_header
    movl $0, disk_header + 4
    movl $0, disk_header + 8    /* sector 0 */
    movl $0, disk_header + 12
    movl $(VRING_DESC_F_NEXT | VRING_DESC_F_WRITE), %edx      /* a read: the device writes the data */
    cmpb $0, disk_writing
    je 2f
    movl $VIRTIO_BLK_T_OUT, disk_header
    mov $msg_disk_mark, %esi
    mov $disk_buf, %edi
    mov $(msg_disk_mark_end - msg_disk_mark), %ecx
    rep movsb
    mov $VRING_DESC_F_NEXT, %edx
2:  movb $0xff, disk_status
    movl $disk_header, vq_desc            /* descriptor 0: the header, 16 bytes */
    movl $16, vq_desc + 8
    movw $VRING_DESC_F_NEXT, vq_desc + 12
    movw $1, vq_desc + 14
    movl $disk_buf, vq_desc + 16          /* descriptor 1: the data */
    movl $DISK_BYTES, vq_desc + 24
    movw %dx, vq_desc + 28
    movw $2, vq_desc + 30
    movl $disk_status, vq_desc + 32       /* descriptor 2: the status byte the device writes */
    movl $1, vq_desc + 40
    movw $VRING_DESC_F_WRITE, vq_desc + 44
    movw $VRING_AVAIL_F_NO_INTERRUPT, vq_avail
    movw $0, vq_avail + 4                 /* ring[0]: the chain at descriptor 0 */
    mfence
    movw $1, vq_avail + 2                 /* idx */
    mfence
    mov vq_notify, %edi
    movw $0, (%edi)                       /* queue 0 has a buffer */
    mov $DISK_POLLS, %ecx
3:  cmpw $1, vq_used + 2                  /* the used ring's idx */
    je 4f
    pause
    dec %ecx
    jnz 3b
    jmp disk_error
4:  mov vq_common, %esi
    movb $0, VQ_STATUS(%esi)              /* reset: the device lets go of the queue */
    cmpb $0, disk_status                  /* VIRTIO_BLK_S_OK */
    jne disk_error
    mov $msg_disk_written, %esi
    cmpb $0, disk_writing
    jne put_slot
    mov $msg_disk_marked, %esi
    mov $disk_buf, %edi
    mov $(msg_disk_mark_end - msg_disk_mark), %ecx
    push %esi
    mov $msg_disk_mark, %esi
    repe cmpsb
    pop %esi
    je put_slot
    mov $msg_disk_unmarked, %esi
    jmp put_slot
disk_error:
    mov vq_common, %esi
    test %esi, %esi
    jz 1f
    movb $0, VQ_STATUS(%esi)
1:  mov $msg_disk_error, %esi
    jmp put_slot

/* virtio_caps: vq_common and vq_notify (virtual addresses) and vq_notify_mult from the
   device's virtio capabilities (at pci_base); all 0 and %eax 0 when they are not both there or
   the BAR cannot be mapped. */
virtio_caps:
    movl $0, vq_common
    movl $0, vq_notify
    movl $0, caps_found
    mov pci_base, %eax
    add $0x34, %eax             /* the capabilities pointer */
    call pci_read
    and $0xfc, %eax
    mov %eax, cap_at
1:  cmpl $0, cap_at
    je 5f
    mov pci_base, %eax
    add cap_at, %eax
    call pci_read               /* vendor, next, length, cfg_type */
    mov %eax, cap_head
    shr $8, %eax
    and $0xfc, %eax
    mov %eax, cap_next
    cmpb $VIRTIO_CAP_VENDOR, cap_head
    jne 4f
    mov pci_base, %eax
    add cap_at, %eax
    add $4, %eax
    call pci_read               /* bar */
    movzbl %al, %eax
    mov %eax, vq_bar
    mov pci_base, %eax
    add cap_at, %eax
    add $8, %eax
    call pci_read               /* offset in the BAR */
    movzbl cap_head + 3, %ecx
    cmp $VIRTIO_CFG_COMMON, %ecx
    jne 2f
    mov %eax, common_off
    orl $VIRTIO_CFG_COMMON, caps_found
    jmp 4f
2:  cmp $VIRTIO_CFG_NOTIFY, %ecx
    jne 4f
    mov %eax, notify_off
    orl $VIRTIO_CFG_NOTIFY, caps_found
    mov pci_base, %eax
    add cap_at, %eax
    add $16, %eax
    call pci_read               /* notify_off_multiplier */
    mov %eax, vq_notify_mult
4:  mov cap_next, %eax
    mov %eax, cap_at
    jmp 1b
5:  xor %eax, %eax
    cmpl $(VIRTIO_CFG_COMMON | VIRTIO_CFG_NOTIFY), caps_found
    jne 7f
    mov vq_bar, %eax            /* the BAR (both in one, as Cloud Hypervisor has them): 32- or 64-bit */
    lea 0x10(,%eax,4), %eax
    add pci_base, %eax
    push %eax
    call pci_read
    mov %eax, %ebx
    xor %edx, %edx
    pop %eax
    test $0x4, %ebx
    jz 6f
    add $4, %eax
    call pci_read
    mov %eax, %edx
6:  mov %ebx, %eax
    and $0xfffffff0, %eax
    call mmio_window
    test %eax, %eax
    jz 7f
    mov common_off, %ecx
    add %eax, %ecx
    mov %ecx, vq_common
    add notify_off, %eax
    mov %eax, vq_notify
7:  ret

/* --- hotplug ------------------------------------------------------------------------------ */

/* pci_scan: \_SB_.PHPR.PSCN: for each PCI segment, PCNT: select it, report the slots added,
   eject those to eject (see the header). */
pci_scan:
    cmpl $0, phpr_addr
    je 9f
    movl $0, cur_seg
1:  mov cur_seg, %eax
    cmp pci_segments, %eax
    jae 9f
    mov phpr_addr, %ebx
    mov %eax, PHPR_PSEG(%ebx)   /* choose the segment */
    mov PHPR_PCIU(%ebx), %eax   /* the slots added; the read clears them */
    mov %eax, slots
    movl $0, cur_slot
2:  mov slots, %eax
    test %eax, %eax
    jz 3f
    shrl $1, slots
    test $1, %eax
    jz 21f
    mov $msg_pci_added, %esi
    call put_slot
21: incl cur_slot
    jmp 2b
3:  mov phpr_addr, %ebx
    mov PHPR_PCID(%ebx), %eax   /* the slots to eject; the read clears them */
    mov %eax, slots
    movl $0, cur_slot
4:  mov slots, %eax
    test %eax, %eax
    jz 8f
    shrl $1, slots
    test $1, %eax
    jz 7f
    cmpb $0, ignore_eject
    jne 6f
    mov $msg_pci_eject, %esi
    call put_slot
    mov phpr_addr, %ebx         /* the slot's _EJ0 -> PCEJ(slot, segment) */
    mov cur_seg, %eax
    mov %eax, PHPR_PSEG(%ebx)
    mov cur_slot, %ecx
    mov $1, %eax
    shl %cl, %eax
    mov %eax, PHPR_B0EJ(%ebx)   /* the VMM ejects the device before this returns */
    jmp 7f
6:  mov $msg_pci_eject_ignored, %esi
    call put_slot
7:  incl cur_slot
    jmp 4b
8:  incl cur_seg
    jmp 1b
9:  ret

/* put_slot: the message at %esi, then "<segment>:<slot>" and a line end. */
put_slot:
    call puts
    mov cur_seg, %eax
    call putdec
    mov $':', %al
    call putc
    mov cur_slot, %eax
    call putdec
    mov $msg_crlf, %esi
    jmp puts

/* cpu_scan: \_SB_.CPUS.CSCN: for each vCPU, select it, acknowledge an insertion, acknowledge
   and eject a removal (see the header). */
cpu_scan:
    cmpl $0, pres_addr
    je 9f
    movl $0, cur_cpu
1:  mov cur_cpu, %eax
    cmp max_cpus, %eax
    jae 9f
    mov pres_addr, %ebx
    mov %eax, PRES_CSEL(%ebx)   /* choose the vCPU */
    movb PRES_STATUS(%ebx), %al
    movb %al, cpu_status
    test $CPU_INSERTING, %al
    jz 2f
    movb $CPU_INSERTING, PRES_STATUS(%ebx)   /* CINS = 1: insertion seen */
    mov $msg_cpu_added, %esi
    call put_cpu
2:  testb $CPU_REMOVING, cpu_status
    jz 5f
    mov pres_addr, %ebx
    movb $CPU_REMOVING, PRES_STATUS(%ebx)    /* CRMV = 1: removal request seen */
    cmpb $0, ignore_eject
    jne 4f
    mov $msg_cpu_eject, %esi
    call put_cpu
    mov pres_addr, %ebx         /* its _EJ0 -> CEJ0(id): select it, CEJ0 = 1 */
    mov cur_cpu, %eax
    mov %eax, PRES_CSEL(%ebx)
    movb $CPU_EJECT, PRES_STATUS(%ebx)       /* the VMM stops that vCPU before this returns */
    jmp 5f
4:  mov $msg_cpu_eject_ignored, %esi
    call put_cpu
5:  incl cur_cpu
    jmp 1b
9:  ret

/* put_cpu: the message at %esi, then the vCPU's id and a line end. */
put_cpu:
    call puts
    mov cur_cpu, %eax
    call putdec
    mov $msg_crlf, %esi
    jmp puts

/* putdec: %eax (below 1000) in decimal on COM1, by subtraction (no div). Clobbers eax, ebx,
   ecx, edx. */
putdec:
    push %edi
    mov %eax, %ebx              /* what is left: the units, in the end */
    xor %ecx, %ecx              /* hundreds */
1:  cmp $100, %ebx
    jb 2f
    sub $100, %ebx
    inc %ecx
    jmp 1b
2:  xor %edi, %edi              /* tens */
3:  cmp $10, %ebx
    jb 4f
    sub $10, %ebx
    inc %edi
    jmp 3b
4:  test %ecx, %ecx
    jz 5f
    lea '0'(%ecx), %eax
    call putc
    jmp 6f                      /* after the hundreds, the tens even when 0 */
5:  test %edi, %edi
    jz 7f
6:  lea '0'(%edi), %eax
    call putc
7:  lea '0'(%ebx), %eax
    call putc
    pop %edi
    ret

/* putc: %al on COM1. Clobbers %dx. */
putc:
    mov $COM1, %dx
    out %al, %dx
    ret

/* puts: writes the NUL-terminated string at %esi to COM1. */
puts:
    mov $COM1, %dx
1:  lodsb
    test %al, %al
    jz 2f
    out %al, %dx
    jmp 1b
2:  ret

/* --- finding devices --------------------------------------------------------------------- */

/* find_pvpanic: %ebx = the pvpanic device's BAR0 (memory space enabled), 0 if there is none.
   Scans bus 0, function 0 of every slot, through the 0xcf8/0xcfc configuration ports. */
find_pvpanic:
    xor %ecx, %ecx
1:  mov %ecx, %eax
    shl $11, %eax
    or $0x80000000, %eax        /* enable | bus 0 | device %ecx | function 0 | register 0 */
    mov %eax, %edi
    mov $PCI_ADDRESS, %dx
    out %eax, %dx
    mov $PCI_DATA, %dx
    in %dx, %eax
    cmp $PVPANIC_ID, %eax
    je 2f
    inc %ecx
    cmp $32, %ecx
    jb 1b
    xor %ebx, %ebx
    ret
2:  lea 0x10(%edi), %eax        /* BAR0 */
    mov $PCI_ADDRESS, %dx
    out %eax, %dx
    mov $PCI_DATA, %dx
    in %dx, %eax
    and $0xfffffff0, %eax
    mov %eax, %ebx
    lea 0x04(%edi), %eax        /* command register: memory space on */
    mov $PCI_ADDRESS, %dx
    out %eax, %dx
    mov $PCI_DATA, %dx
    in %dx, %eax
    or $0x2, %eax
    out %eax, %dx
    ret

/* find_devices: what the ACPI tables say: the GED's address and GSI, the PCI and CPU hotplug
   controllers' addresses (DSDT), the number of vCPUs (MADT) and of PCI segments (MCFG). Without
   a GED (said on COM1) nothing is notified, so nothing else is looked for. */
find_devices:
    call find_acpi
    mov $0x50434146, %eax       /* "FACP" */
    call find_table
    test %eax, %eax
    jz no_ged
    mov 40(%eax), %esi          /* DSDT */
    cmpl $148, 4(%eax)
    jb 1f
    mov 140(%eax), %ecx         /* X_DSDT, low half */
    test %ecx, %ecx
    jz 1f
    mov %ecx, %esi
1:  mov %esi, dsdt
    mov 4(%esi), %edx
    add %esi, %edx              /* end of the DSDT */
    mov %edx, dsdt_end
    mov $0x5f434547, %eax       /* "GEC_" */
    mov $0xffffffff, %ecx
    call find
    test %esi, %esi
    jz no_ged
    mov %esi, gec_at
    call device_window          /* the GED's registers */
    test %eax, %eax
    jz no_ged
    mov %eax, ged_addr
    mov gec_at, %esi
    mov dsdt_end, %edx
    mov $0x5f444547, %eax       /* "GED_" */
    mov $0xffffffff, %ecx
    call find
    test %esi, %esi
    jz no_ged
    mov $0x00000689, %eax       /* extended interrupt descriptor, length 6 */
    mov $0x00ffffff, %ecx
    call find
    test %esi, %esi
    jz no_ged
    mov 5(%esi), %eax           /* its (only) interrupt number */
    mov %eax, ged_irq
    mov $0x52504850, %eax       /* "PHPR": the PCI hotplug controller */
    call find_device
    call device_window
    mov %eax, phpr_addr
    mov $0x53455250, %eax       /* "PRES": the CPU hotplug controller */
    call find_device
    call device_window
    mov %eax, pres_addr
    call count_cpus
    call count_segments
    ret
no_ged:
    movl $0, ged_addr
    movl $0, ged_irq
    mov $msg_no_ged, %esi
    jmp puts

/* find_acpi: root_table and root_step: the XSDT (8-byte entries) or RSDT (4) of the RSDP from
   hvm_start_info, else from a scan of the BIOS area; root_table stays 0 without one. */
find_acpi:
    mov start_info, %esi
    mov 32(%esi), %esi          /* rsdp_paddr, low half */
    test %esi, %esi
    jz 1f
    call is_rsdp
    je 3f
1:  mov $0xe0000, %esi
2:  call is_rsdp
    je 3f
    add $16, %esi
    cmp $0x100000, %esi
    jb 2b
    ret
3:  movl $4, root_step          /* RSDT entries are 32-bit */
    mov 16(%esi), %eax
    cmpb $2, 15(%esi)           /* revision 2+: the XSDT, 64-bit entries */
    jb 4f
    movl $8, root_step
    mov 24(%esi), %eax
4:  mov %eax, root_table
    ret

/* find_table: %eax = the ACPI table whose signature is %eax, 0 if there is none. Clobbers
   %ecx, %edx, %edi. */
find_table:
    mov root_table, %edi
    test %edi, %edi
    jz 3f
    mov 4(%edi), %edx
    add %edi, %edx              /* end of the table */
    add $36, %edi               /* past the header */
1:  cmp %edx, %edi
    jae 3f
    mov (%edi), %ecx
    cmp %eax, (%ecx)
    je 2f
    add root_step, %edi
    jmp 1b
2:  mov %ecx, %eax
    ret
3:  xor %eax, %eax
    ret

/* find_device: %esi = where the DSDT defines device \_SB_.<the name in %eax>: its name after
   "_SB_" and a DualNamePrefix (0x2e; references to it are three-part names), 0 if nowhere.
   Clobbers %ebx, %ecx, %edx, %edi. */
find_device:
    mov %eax, %edi
    mov dsdt, %esi
    add $36, %esi
    mov dsdt_end, %edx
1:  mov %edi, %eax
    mov $0xffffffff, %ecx
    call find
    test %esi, %esi
    jz 2f
    cmpl $0x5f42535f, -4(%esi)  /* "_SB_" */
    jne 3f
    cmpb $0x2e, -5(%esi)
    je 2f
3:  inc %esi
    jmp 1b
2:  ret

/* device_window: %eax = a virtual address for the device whose definition is at %esi in the
   DSDT: the minimum of the first QWord address space descriptor after it (its _CRS), mapped by
   mmio_window; 0 when %esi is 0 or there is none. Clobbers %ebx, %ecx, %edx, %esi, %edi. */
device_window:
    xor %eax, %eax
    test %esi, %esi
    jz 1f
    mov dsdt_end, %edx
    mov $0x00002b8a, %eax       /* QWord address space descriptor, length 43 */
    mov $0x00ffffff, %ecx
    call find
    xor %eax, %eax
    test %esi, %esi
    jz 1f
    mov 14(%esi), %eax          /* the minimum, low half */
    mov 18(%esi), %edx          /* and high half */
    call mmio_window
1:  ret

/* mmio_window: %eax = a virtual address for the physical address %edx:%eax, through a 2 MiB
   window from MMIO_WINDOWS: the one already mapping that page, else the next free one (0 when
   all are used). Cloud Hypervisor puts its platform devices (GED, hotplug controllers) in the
   last MiB of the physical address space and its virtio BARs above RAM, above 4 GiB, which the
   guest reaches only through paging. The windows hide the identity mapping of a range the guest
   never uses (at most RAM it does not touch). The TLB is flushed (CR3 reloaded), so a window may
   be made with paging on. Clobbers %ecx, %edi. */
mmio_window:
    push %eax
    and $0xffe00000, %eax
    or $0x9b, %eax              /* present, writable, uncached, 2 MiB */
    xor %ecx, %ecx
    lea page_dirs + (MMIO_WINDOWS >> 21) * 8, %edi
1:  cmp windows_used, %ecx      /* a window of this page already? */
    jae 2f
    cmp %eax, (%edi)
    jne 11f
    cmp %edx, 4(%edi)
    je 3f
11: add $8, %edi
    inc %ecx
    jmp 1b
2:  cmp $MMIO_WINDOW_COUNT, %ecx
    jae 4f
    mov %eax, (%edi)
    mov %edx, 4(%edi)           /* physical address bits 32 and up */
    incl windows_used
    mov %cr3, %eax              /* no stale translation of the window */
    mov %eax, %cr3
3:  pop %eax
    and $0x1fffff, %eax         /* the offset in the page */
    shl $21, %ecx
    add $MMIO_WINDOWS, %ecx
    add %ecx, %eax
    ret
4:  pop %eax
    xor %eax, %eax
    ret

/* map_low: PAE page tables with 2 MiB pages mapping the low 4 GiB to themselves (the image,
   the ACPI tables, the IOAPIC, the LAPIC, 32-bit PCI BARs); mmio_window then replaces some. */
map_low:
    mov $page_dirs, %edi
    mov $0x83, %eax             /* physical 0, present, writable, 2 MiB */
    mov $2048, %ecx
1:  mov %eax, (%edi)
    movl $0, 4(%edi)
    add $0x200000, %eax
    add $8, %edi
    dec %ecx
    jnz 1b
    movl $pdpt + 3, pml4
    movl $0, pml4 + 4
    mov $pdpt, %edi
    mov $page_dirs + 3, %eax    /* present */
    mov $4, %ecx
2:  mov %eax, (%edi)
    movl $0, 4(%edi)
    add $4096, %eax
    add $8, %edi
    dec %ecx
    jnz 2b
    ret

/* paging_on: IA-32e mode on the tables map_low and mmio_window made (CR4.PAE, EFER.LME,
   CR0.PG). The code goes on in compatibility mode (CS stays the 32-bit CODE); PVM refuses
   32-bit PAE paging (#GP on CR0.PG) but runs IA-32e mode. */
paging_on:
    mov $pml4, %eax
    mov %eax, %cr3
    mov %cr4, %eax
    or $0x20, %eax              /* CR4.PAE */
    mov %eax, %cr4
    mov $0xc0000080, %ecx       /* EFER */
    rdmsr
    or $0x100, %eax             /* LME */
    wrmsr
    mov %cr0, %eax
    or $0x80000000, %eax        /* CR0.PG */
    mov %eax, %cr0
    ret

/* count_cpus: max_cpus = the MADT's processor local APIC and x2APIC entries (one per possible
   vCPU, enabled or not). */
count_cpus:
    mov $0x43495041, %eax       /* "APIC" */
    call find_table
    xor %ecx, %ecx
    test %eax, %eax
    jz 4f
    mov 4(%eax), %edx
    add %eax, %edx              /* end of the table */
    lea 44(%eax), %esi          /* past the header, local APIC address and flags */
1:  cmp %edx, %esi
    jae 4f
    movzbl 1(%esi), %edi        /* the entry's length */
    test %edi, %edi
    jz 4f
    cmpb $9, (%esi)             /* processor local x2APIC */
    je 2f
    cmpb $0, (%esi)             /* processor local APIC */
    jne 3f
2:  inc %ecx
3:  add %edi, %esi
    jmp 1b
4:  mov %ecx, max_cpus
    ret

/* count_segments: pci_segments = the MCFG's entries (16 bytes each after 44), 1 without one. */
count_segments:
    mov $0x4746434d, %eax       /* "MCFG" */
    call find_table
    mov $1, %ecx
    test %eax, %eax
    jz 1f
    mov 4(%eax), %ecx
    sub $44, %ecx
    shr $4, %ecx
1:  mov %ecx, pci_segments
    ret

/* is_rsdp: ZF set when %esi points at "RSD PTR ". */
is_rsdp:
    cmpl $0x20445352, (%esi)
    jne 1f
    cmpl $0x20525450, 4(%esi)
1:  ret

/* find: %esi = the first address in [%esi, %edx) whose dword, masked with %ecx, is %eax; 0 if
   there is none. Clobbers %ebx. */
find:
1:  cmp %edx, %esi
    jae 2f
    mov (%esi), %ebx
    and %ecx, %ebx
    cmp %eax, %ebx
    je 3f
    inc %esi
    jmp 1b
2:  xor %esi, %esi
3:  ret

    .data
    .balign 8
gdt:
    .quad 0
    .quad 0x00cf9a000000ffff    /* CODE: 32-bit, flat, execute/read */
    .quad 0x00cf92000000ffff    /* DATA: flat, read/write */
    .quad 0x00af9a000000ffff    /* CODE64: 64-bit, execute/read (interrupt gates) */
gdt_desc:
    .word gdt_desc - gdt - 1
    .long gdt
idt_desc:
    .word 256 * 16 - 1
    .long idt
no_idt:
    .word 0
    .long 0

msg_ready:                 .asciz "KCH-GUEST-READY\r\n"
msg_poweroff:              .asciz "KCH-GUEST-POWEROFF\r\n"
msg_reboot:                .asciz "KCH-GUEST-REBOOT\r\n"
msg_triple_fault:          .asciz "KCH-GUEST-TRIPLE-FAULT\r\n"
msg_panic:                 .asciz "KCH-GUEST-PANIC\r\n"
msg_no_pvpanic:            .asciz "KCH-GUEST-NO-PVPANIC\r\n"
msg_ignoring_acpi:         .asciz "KCH-GUEST-IGNORING-ACPI\r\n"
msg_honouring_acpi:        .asciz "KCH-GUEST-HONOURING-ACPI\r\n"
msg_hello:                 .asciz "KCH-GUEST-HELLO\r\n"
msg_flooding:              .asciz "KCH-GUEST-FLOODING\r\n"
msg_flood_line:            .asciz "KCH-GUEST-FLOOD 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\r\n"
msg_flood_stopped:         .asciz "KCH-GUEST-FLOOD-STOPPED\r\n"
msg_emulation_failure:     .asciz "KCH-GUEST-EMULATION-FAILURE\r\n"
msg_unknown:               .asciz "KCH-GUEST-UNKNOWN-COMMAND\r\n"
msg_power_button:          .asciz "KCH-GUEST-POWER-BUTTON\r\n"
msg_power_button_ignored:  .asciz "KCH-GUEST-POWER-BUTTON-IGNORED\r\n"
msg_no_ged:                .asciz "KCH-GUEST-NO-GED\r\n"
msg_ignoring_eject:        .asciz "KCH-GUEST-IGNORING-EJECT\r\n"
msg_honouring_eject:       .asciz "KCH-GUEST-HONOURING-EJECT\r\n"
msg_pci_added:             .asciz "KCH-GUEST-PCI-ADDED "
msg_pci_eject:             .asciz "KCH-GUEST-PCI-EJECT "
msg_pci_eject_ignored:     .asciz "KCH-GUEST-PCI-EJECT-IGNORED "
msg_cpu_added:             .asciz "KCH-GUEST-CPU-ADDED "
msg_cpu_eject:             .asciz "KCH-GUEST-CPU-EJECT "
msg_cpu_eject_ignored:     .asciz "KCH-GUEST-CPU-EJECT-IGNORED "
msg_disk_written:          .asciz "KCH-GUEST-DISK-WRITTEN "
msg_disk_read_only:        .asciz "KCH-GUEST-DISK-READ-ONLY "
msg_disk_marked:           .asciz "KCH-GUEST-DISK-MARKED "
msg_disk_unmarked:         .asciz "KCH-GUEST-DISK-UNMARKED "
msg_disk_error:            .asciz "KCH-GUEST-DISK-ERROR "
msg_no_disks:              .asciz "KCH-GUEST-NO-DISKS\r\n"
msg_disks_done:            .asciz "KCH-GUEST-DISKS-DONE\r\n"
msg_disk_mark:             .ascii "KCH-GUEST-DISK-MARK\n"
msg_disk_mark_end:
msg_crlf:                  .asciz "\r\n"
msg_exception:             .asciz "KCH-GUEST-EXCEPTION "

    .bss
    .balign 16
start_info:  .long 0
ged_addr:    .long 0
ged_irq:     .long 0
gec_at:      .long 0
windows_used: .long 0
root_table:  .long 0
root_step:   .long 0
dsdt:        .long 0
dsdt_end:    .long 0
phpr_addr:   .long 0            /* the PCI hotplug controller */
pres_addr:   .long 0            /* the CPU hotplug controller */
max_cpus:    .long 0
pci_segments: .long 0
cur_seg:     .long 0            /* the scans' state (interrupts are off while they run) */
cur_slot:    .long 0
slots:       .long 0
cur_cpu:     .long 0
tilde:       .byte 0
ignore_acpi: .byte 0
ignore_eject: .byte 0
flooding:    .byte 0
ged_events:  .byte 0
exception_vector: .byte 0
cpu_status:  .byte 0
disk_writing: .byte 0
    .balign 4
pci_base:    .long 0            /* the disk commands' state (interrupts are off while they run) */
disks_found: .long 0
disk_features: .long 0
cap_at:      .long 0
cap_head:    .long 0
cap_next:    .long 0
vq_bar:      .long 0
caps_found:  .long 0
common_off:  .long 0
notify_off:  .long 0
vq_common:   .long 0            /* virtual addresses of the common configuration and of queue 0's */
vq_notify:   .long 0            /* notification register */
vq_notify_mult: .long 0
    .balign 16
disk_header: .space 16          /* type, reserved, sector */
disk_status: .byte 0
    .balign 4096
vq:                             /* queue 0: QUEUE_ENTRIES descriptors, the avail and used rings */
vq_desc:     .space 16 * QUEUE_ENTRIES
vq_avail:    .space 64
vq_used:     .space 64
vq_end:
    .balign 4096
disk_buf:    .space DISK_BYTES
    .balign 16
idt:         .space 256 * 16
    .balign 4096
page_dirs:   .space 4 * 4096    /* 4 page directories: 2048 PDEs of 2 MiB, the low 4 GiB */
    .balign 4096
pdpt:        .space 4096
pml4:        .space 4096
    .space 4096
stack_top:
