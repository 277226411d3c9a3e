/*
 * The tiny guest: a few hundred instructions that run at once even on PVM, where a Linux guest
 * does not boot. Loaded by cloud-hypervisor as its firmware or kernel payload (an ELF64 with a
 * PVH entry note), it prints a marker on COM1 and then echoes what it reads there.
 *
 * Boot state (cloud-hypervisor arch/src/x86_64/regs.rs@v53, PVH): 32-bit protected mode, flat
 * segments, paging off, interrupts off, %ebx = hvm_start_info; no stack is set up.
 * COM1 is the 16550 at 0x3f8 (LSR at +5, bit 0 = data ready). Port 0x600 is cloud-hypervisor's
 * ACPI shutdown device: 0x34 (SLP_TYP 5 << 2 | SLP_EN) powers off (devices/src/acpi.rs@v53).
 *
 * Commands typed on the console are '~' and a letter (anything else is echoed):
 *   ~p  powers off
 */
    .section .note.pvh, "a", @note
    .balign 4
    .long 4                     /* namesz */
    .long 4                     /* descsz */
    .long 18                    /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .long _start

    .set COM1, 0x3f8
    .set COM1_LSR, 0x3fd
    .set ACPI_SLEEP_CONTROL, 0x600
    .set S5, 0x34

    .text
    .code32
    .globl _start
_start:
    mov $stack_top, %esp
    mov $ready, %esi
    call puts
echo:
    call getc
    cmp $'~', %al
    je command
    out %al, %dx
    jmp echo

command:
    call getc
    cmp $'p', %al
    je poweroff
    jmp echo

poweroff:
    mov $ACPI_SLEEP_CONTROL, %dx
    mov $S5, %al
    out %al, %dx
    hlt

/* getc: waits for a byte on COM1 and returns it in %al (%dx = COM1). */
getc:
    mov $COM1_LSR, %dx
1:  in %dx, %al
    test $1, %al
    jz 1b
    mov $COM1, %dx
    in %dx, %al
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

    .data
ready: .asciz "KCH-GUEST-READY\r\n"

    .bss
    .balign 16
    .space 4096
stack_top:
