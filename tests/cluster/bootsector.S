/*
 * The boot sector of the cluster's containerDisk: what SeaBIOS boots when KubeVirt runs a VMI of
 * that disk on QEMU (q35). Cloud Hypervisor VMIs of the same disk never run it (they boot the tiny
 * guest of tests/guest as firmware). It prints on COM1, at every boot,
 *     KCH-BOOT-SECTOR-READY
 * then idles in `hlt` with interrupts on (SeaBIOS's timer tick wakes it 18 times a second; no
 * polling loop burns CPU), checking the ACPI power button at each wake. When the button is pressed
 * (virt-launcher's shutdown: libvirt's default, QEMU's system_powerdown) it prints
 *     KCH-BOOT-SECTOR-POWER-BUTTON
 * and powers off (ACPI S5: SLP_EN with SLP_TYP 0, QEMU's \_S5, to PM1a_CNT), so `kubectl delete`
 * of a QEMU VMI ends as gracefully as one of the tiny guest. Where the power-management registers
 * cannot be found (no ICH9 LPC bridge at 00:1f.0, i.e. not q35) it prints KCH-BOOT-SECTOR-NO-ICH9
 * and halts with interrupts off.
 *
 * Boot state (BIOS boot protocol): 16-bit real mode at 0000:7c00, the BIOS's interrupt vectors and
 * timer running. ICH9's ACPI registers are at PMBASE (LPC config 0x40, bits 15:7; SeaBIOS sets
 * 0x600): PM1_STS at +0 (PWRBTN_STS bit 8, write 1 to clear), PM1_EN at +2 (PWRBTN_EN bit 8:
 * QEMU sets the status bit only when it is enabled), PM1_CNT at +4 (SLP_EN bit 13).
 */
    .code16
    .text
    .globl _start
_start:
    cli
    cld
    xorw %ax, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movw $0x7c00, %sp
    ljmp $0, $start

start:
    /* COM1: 115200 8N1, FIFOs on, no interrupts */
    movw $0x3f9, %dx
    xorb %al, %al
    outb %al, %dx
    movw $0x3fb, %dx
    movb $0x80, %al
    outb %al, %dx
    movw $0x3f8, %dx
    movb $1, %al
    outb %al, %dx
    movw $0x3f9, %dx
    xorb %al, %al
    outb %al, %dx
    movw $0x3fb, %dx
    movb $0x03, %al
    outb %al, %dx
    movw $0x3fa, %dx
    movb $0xc7, %al
    outb %al, %dx
    movw $0x3fc, %dx
    movb $0x03, %al
    outb %al, %dx

    movw $ready, %si
    call puts

    /* the PM registers of the ICH9 LPC bridge, 8086:2918 at 00:1f.0 */
    movl $0x8000f800, %eax
    call pci_read
    cmpl $0x29188086, %eax
    jne no_ich9
    movl $0x8000f840, %eax
    call pci_read
    andw $0xff80, %ax
    movw %ax, %bx

    movw $0x0100, %ax
    movw %bx, %dx
    outw %ax, %dx               /* clear a stale PWRBTN_STS */
    leaw 2(%bx), %dx
    outw %ax, %dx               /* PWRBTN_EN */
    sti

idle:
    hlt
    movw %bx, %dx
    inw %dx, %ax
    testw $0x0100, %ax
    jz idle

    cli
    movw $0x0100, %ax
    outw %ax, %dx
    movw $button, %si
    call puts
    leaw 4(%bx), %dx
    movw $0x2000, %ax           /* SLP_EN, SLP_TYP 0: S5 */
    outw %ax, %dx
    jmp halt

no_ich9:
    movw $noich9, %si
    call puts
halt:
    cli
    hlt
    jmp halt

/* %eax: a PCI configuration address (type 1); returns the dword there in %eax */
pci_read:
    movw $0xcf8, %dx
    outl %eax, %dx
    movw $0xcfc, %dx
    inl %dx, %eax
    ret

/* prints the NUL-terminated string at %si on COM1 */
puts:
    lodsb
    testb %al, %al
    jz 2f
    movb %al, %ah
    movw $0x3fd, %dx
1:
    inb %dx, %al
    testb $0x20, %al            /* LSR: transmitter holding register empty */
    jz 1b
    movb %ah, %al
    movw $0x3f8, %dx
    outb %al, %dx
    jmp puts
2:
    ret

ready:  .asciz "KCH-BOOT-SECTOR-READY\r\n"
button: .asciz "KCH-BOOT-SECTOR-POWER-BUTTON\r\n"
noich9: .asciz "KCH-BOOT-SECTOR-NO-ICH9\r\n"

    .org 510
    .byte 0x55, 0xaa
