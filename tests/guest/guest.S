/*
 * The tiny guest: a few hundred instructions that run at once even on PVM, where a Linux guest
 * does not boot. Loaded by cloud-hypervisor as its firmware or kernel payload (an ELF with a PVH
 * entry note), it prints a marker on COM1, echoes what it reads there, acts on the commands
 * below and on the ACPI power button, and otherwise idles in `hlt` with interrupts on (no
 * polling: it costs no CPU while nothing happens). On PVM it runs under KVM's instruction
 * emulator, which limits it to instructions the emulator knows (no iret: see `idle`).
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
 *     ~h  KCH-GUEST-HELLO            nothing else: tells a client the guest is up and hears it
 *     ~e  KCH-GUEST-EMULATION-FAILURE  jumps to an address that is not RAM, so the vCPU fails
 *                                    (KVM cannot fetch instructions from MMIO: KVM_EXIT_INTERNAL_ERROR,
 *                                    on PVM and on VT-x/SVM alike; the VMM then stops the VM)
 *     ~~  echoes one '~'; any other letter prints KCH-GUEST-UNKNOWN-COMMAND
 * The power button prints KCH-GUEST-POWER-BUTTON and powers off, or, while ignoring ACPI,
 * prints KCH-GUEST-POWER-BUTTON-IGNORED and carries on. Without a GED in the DSDT it prints
 * KCH-GUEST-NO-GED once at boot, before the marker. An unexpected CPU exception prints
 * KCH-GUEST-EXCEPTION and halts.
 *
 * Boot state (cloud-hypervisor arch/src/x86_64/regs.rs@v53, PVH): 32-bit protected mode, flat
 * segments, paging off, interrupts off, %ebx = hvm_start_info (rsdp_paddr at +32); no stack.
 * Devices (cloud-hypervisor v53): COM1 is a 16550 at 0x3f8 on IOAPIC pin 4 (LSR at +5, bit 0 =
 * data ready; IER at +1); port 0x600 is the ACPI shutdown/reset device (devices/src/acpi.rs:
 * 0x34 = SLP_TYP 5 << 2 | SLP_EN powers off, 1 resets); the IOAPIC is at 0xfec00000, the local
 * APIC at 0xfee00000 (xAPIC mode below 255 vCPUs, arch/src/x86_64/layout.rs); the ACPI GED's
 * MMIO address and GSI are allocated at run time, so they are read from the DSDT: _SB_.GEC_'s
 * QWord memory resource and _SB_.GED_'s extended interrupt resource (acpi.rs AcpiGedDevice);
 * reading the GED's byte returns the pending events and clears them, bit 3 = power button
 * (devices/src/lib.rs AcpiNotificationFlags::POWER_BUTTON_CHANGED); pvpanic is PCI 1b36:0011
 * with a 32-bit memory BAR0 (devices/src/pvpanic.rs), found through the 0xcf8/0xcfc ports.
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
    .set GED_POWER_BUTTON, 8
    .set PCI_ADDRESS, 0xcf8
    .set PCI_DATA, 0xcfc
    .set PVPANIC_ID, 0x00111b36   /* device 0x0011 << 16 | vendor 0x1b36 */
    .set PVPANIC_PANICKED, 1
    .set CODE, 0x08
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
    call setup_idt
    call find_ged
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

/* setup_idt: 256 32-bit interrupt gates: exceptions, COM1, GED, spurious, and EOI for the rest. */
setup_idt:
    mov $idt, %edi
    xor %ecx, %ecx
1:  mov $isr_default, %eax
    cmp $32, %ecx
    jae 2f
    mov $isr_exception, %eax
2:  cmp $VEC_SERIAL, %ecx
    jne 3f
    mov $isr_serial, %eax
3:  cmp $VEC_GED, %ecx
    jne 4f
    mov $isr_ged, %eax
4:  cmp $VEC_SPURIOUS, %ecx
    jne 5f
    mov $isr_spurious, %eax
5:  mov %ax, (%edi)             /* offset 15:0 */
    movw $CODE, 2(%edi)         /* selector */
    movw $0x8e00, 4(%edi)       /* present, DPL 0, 32-bit interrupt gate */
    shr $16, %eax
    mov %ax, 6(%edi)            /* offset 31:16 */
    add $8, %edi
    inc %ecx
    cmp $256, %ecx
    jb 1b
    lidt idt_desc
    ret

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
    test $GED_POWER_BUTTON, %al
    jz 2f
    cmpb $0, ignore_acpi
    jne 1f
    mov $msg_power_button, %esi
    call puts
    jmp poweroff
1:  mov $msg_power_button_ignored, %esi
    call puts
2:  call eoi
    jmp idle

isr_default:
    call eoi
    jmp idle

isr_spurious:                   /* no EOI for the spurious vector */
    jmp idle

isr_exception:
    mov $msg_exception, %esi
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

/* The 32-bit device area (0xc0000000 + 640 MiB: PCI BARs, never RAM; cloud-hypervisor
   arch/src/x86_64/layout.rs@v53 MEM_32BIT_DEVICES_START): KVM's emulator cannot fetch an
   instruction there and, the guest being at CPL 0, exits with an emulation failure
   (KVM_EXIT_INTERNAL_ERROR), which cloud-hypervisor treats as a vCPU error. */
cmd_emulation_failure:
    mov $msg_emulation_failure, %esi
    call puts
    mov $0xd0000000, %eax
    jmp *%eax

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

/* find_ged: ged_addr and ged_irq from the DSDT (left 0 when not found, said on COM1). The RSDP
   comes from hvm_start_info, else from a scan of the BIOS area; then the XSDT (or RSDT), the
   FADT, its X_DSDT (or DSDT). */
find_ged:
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
    jmp no_ged
3:  mov $4, %ebx                /* RSDT entries are 32-bit */
    mov 16(%esi), %edi
    cmpb $2, 15(%esi)           /* revision 2+: the XSDT, 64-bit entries */
    jb 4f
    mov $8, %ebx
    mov 24(%esi), %edi
4:  mov 4(%edi), %edx
    add %edi, %edx              /* end of the table */
    add $36, %edi               /* past the header */
5:  cmp %edx, %edi
    jae no_ged
    mov (%edi), %eax
    cmpl $0x50434146, (%eax)    /* "FACP" */
    je 6f
    add %ebx, %edi
    jmp 5b
6:  mov 40(%eax), %esi          /* DSDT */
    cmpl $148, 4(%eax)
    jb 7f
    mov 140(%eax), %ecx         /* X_DSDT, low half */
    test %ecx, %ecx
    jz 7f
    mov %ecx, %esi
7:  mov 4(%esi), %edx
    add %esi, %edx              /* end of the DSDT */
    mov $0x5f434547, %eax       /* "GEC_" */
    mov $0xffffffff, %ecx
    call find
    test %esi, %esi
    jz no_ged
    mov %esi, %edi
    mov $0x00002b8a, %eax       /* QWord address space descriptor, length 43 */
    mov $0x00ffffff, %ecx
    call find
    test %esi, %esi
    jz no_ged
    mov 14(%esi), %eax          /* its minimum: the GED's address */
    mov %eax, ged_addr
    mov %edi, %esi
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
    ret
no_ged:
    movl $0, ged_addr
    movl $0, ged_irq
    mov $msg_no_ged, %esi
    jmp puts

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
gdt_desc:
    .word gdt_desc - gdt - 1
    .long gdt
idt_desc:
    .word 256 * 8 - 1
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
msg_emulation_failure:     .asciz "KCH-GUEST-EMULATION-FAILURE\r\n"
msg_unknown:               .asciz "KCH-GUEST-UNKNOWN-COMMAND\r\n"
msg_power_button:          .asciz "KCH-GUEST-POWER-BUTTON\r\n"
msg_power_button_ignored:  .asciz "KCH-GUEST-POWER-BUTTON-IGNORED\r\n"
msg_no_ged:                .asciz "KCH-GUEST-NO-GED\r\n"
msg_exception:             .asciz "KCH-GUEST-EXCEPTION\r\n"

    .bss
    .balign 16
start_info:  .long 0
ged_addr:    .long 0
ged_irq:     .long 0
tilde:       .byte 0
ignore_acpi: .byte 0
    .balign 16
idt:         .space 256 * 8
    .space 4096
stack_top:
