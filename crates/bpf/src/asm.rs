//! A tiny eBPF assembler: the instructions tcptail's programs use (moves, loads and stores,
//! ALU with immediates, atomic exchange and fetch-add, conditional jumps to labels, helper
//! calls, a map's descriptor as a 64-bit immediate), encoded as `struct bpf_insn`
//! (`include/uapi/linux/bpf.h`) for a little-endian host. Pure: it only builds bytes; the
//! kernel's verifier is the judge of the program. Users: the socket iterator
//! (`tcptail-diag`) and the AF_XDP redirect program (`tcptail-bench`).

/// A register, `r0`..`r10`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reg(pub u8);

/// Return value / helper result.
pub const R0: Reg = Reg(0);
/// First argument (the context at entry).
pub const R1: Reg = Reg(1);
/// Second argument.
pub const R2: Reg = Reg(2);
/// Third argument.
pub const R3: Reg = Reg(3);
/// Fourth argument.
pub const R4: Reg = Reg(4);
/// Fifth argument.
pub const R5: Reg = Reg(5);
/// Callee-saved.
pub const R6: Reg = Reg(6);
/// Callee-saved.
pub const R7: Reg = Reg(7);
/// Callee-saved.
pub const R8: Reg = Reg(8);
/// Callee-saved.
pub const R9: Reg = Reg(9);
/// Frame pointer (read-only).
pub const R10: Reg = Reg(10);

/// Access width of a load or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// 1 byte.
    B,
    /// 2 bytes.
    H,
    /// 4 bytes.
    W,
    /// 8 bytes.
    DW,
}

impl Size {
    /// The width for `bytes` (1, 2, 4 or 8).
    pub fn of(bytes: u32) -> Option<Size> {
        match bytes {
            1 => Some(Size::B),
            2 => Some(Size::H),
            4 => Some(Size::W),
            8 => Some(Size::DW),
            _ => None,
        }
    }

    fn code(self) -> u8 {
        match self {
            Size::W => 0x00,
            Size::H => 0x08,
            Size::B => 0x10,
            Size::DW => 0x18,
        }
    }
}

/// A conditional jump's comparison (64-bit, against an immediate or a register).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    /// `==`.
    Eq,
    /// `!=`.
    Ne,
    /// unsigned `>`.
    Gt,
    /// `& imm != 0`.
    Set,
}

/// A jump target, bound with [`Asm::bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

const CLASS_LD: u8 = 0x00;
const CLASS_LDX: u8 = 0x01;
const CLASS_ST: u8 = 0x02;
const CLASS_STX: u8 = 0x03;
const CLASS_JMP: u8 = 0x05;
const CLASS_ALU64: u8 = 0x07;
const MODE_IMM: u8 = 0x00;
const MODE_MEM: u8 = 0x60;
const MODE_ATOMIC: u8 = 0xc0;
/// `BPF_XCHG` (`0xe0 | BPF_FETCH`).
const ATOMIC_XCHG: i32 = 0xe1;
/// `BPF_ADD | BPF_FETCH`.
const ATOMIC_FETCH_ADD: i32 = 0x01;
const SRC_X: u8 = 0x08;

/// `BPF_PSEUDO_MAP_FD`: the source register of a 64-bit immediate load whose value is a map's
/// descriptor (the kernel swaps in the map).
pub const PSEUDO_MAP_FD: u8 = 1;

/// One instruction, decoded: what [`Asm`] emits as a `u64` in the kernel's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Operation code.
    pub code: u8,
    /// Destination register.
    pub dst: u8,
    /// Source register.
    pub src: u8,
    /// Offset (memory access, jump).
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl Insn {
    /// The instruction's 8 bytes as the kernel reads them (little-endian host).
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.src << 4) | (self.dst & 0x0f);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }

    /// The instruction in the `u64` form [`Asm::finish`] returns.
    pub fn to_word(&self) -> u64 {
        u64::from_ne_bytes(self.encode())
    }

    /// Decodes one word of an assembled program.
    pub fn from_word(word: u64) -> Insn {
        let b = word.to_ne_bytes();
        Insn {
            code: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// A program being built.
#[derive(Debug, Default)]
pub struct Asm {
    insns: Vec<u64>,
    labels: Vec<Option<usize>>,
    /// (instruction index, label) of jumps to patch.
    fixups: Vec<(usize, Label)>,
}

fn encode(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> u64 {
    Insn { code, dst: dst.0, src: src.0, off, imm }.to_word()
}

fn jump_op(cond: Cond) -> u8 {
    match cond {
        Cond::Eq => 0x10,
        Cond::Gt => 0x20,
        Cond::Set => 0x40,
        Cond::Ne => 0x50,
    }
}

impl Asm {
    fn push(&mut self, code: u8, dst: Reg, src: Reg, off: i16, imm: i32) {
        self.insns.push(encode(code, dst, src, off, imm));
    }

    /// `dst = src`.
    pub fn mov(&mut self, dst: Reg, src: Reg) {
        self.push(CLASS_ALU64 | 0xb0 | SRC_X, dst, src, 0, 0);
    }

    /// `dst = imm` (sign-extended).
    pub fn mov_imm(&mut self, dst: Reg, imm: i32) {
        self.push(CLASS_ALU64 | 0xb0, dst, Reg(0), 0, imm);
    }

    /// `dst += imm`.
    pub fn add_imm(&mut self, dst: Reg, imm: i32) {
        self.push(CLASS_ALU64, dst, Reg(0), 0, imm);
    }

    /// `dst <<= src`.
    pub fn lsh(&mut self, dst: Reg, src: Reg) {
        self.push(CLASS_ALU64 | 0x60 | SRC_X, dst, src, 0, 0);
    }

    /// `dst >>= imm` (logical).
    pub fn rsh_imm(&mut self, dst: Reg, imm: i32) {
        self.push(CLASS_ALU64 | 0x70, dst, Reg(0), 0, imm);
    }

    /// `dst &= imm`.
    pub fn and_imm(&mut self, dst: Reg, imm: i32) {
        self.push(CLASS_ALU64 | 0x50, dst, Reg(0), 0, imm);
    }

    /// `dst = *(size *)(src + off)`.
    pub fn load(&mut self, size: Size, dst: Reg, src: Reg, off: i16) {
        self.push(CLASS_LDX | MODE_MEM | size.code(), dst, src, off, 0);
    }

    /// `*(size *)(dst + off) = src`.
    pub fn store(&mut self, size: Size, dst: Reg, off: i16, src: Reg) {
        self.push(CLASS_STX | MODE_MEM | size.code(), dst, src, off, 0);
    }

    /// `*(size *)(dst + off) = imm`.
    pub fn store_imm(&mut self, size: Size, dst: Reg, off: i16, imm: i32) {
        self.push(CLASS_ST | MODE_MEM | size.code(), dst, Reg(0), off, imm);
    }

    /// `src = xchg((u64 *)(dst + off), src)`: an atomic exchange, a full memory barrier on
    /// every JIT (x86's `xchg`, arm64's `swpal`), so the loads after it see what other CPUs
    /// stored before it.
    pub fn atomic_xchg(&mut self, dst: Reg, off: i16, src: Reg) {
        self.push(CLASS_STX | MODE_ATOMIC | Size::DW.code(), dst, src, off, ATOMIC_XCHG);
    }

    /// `src = fetch_add((u64 *)(dst + off), src)`: an atomic add returning the old value,
    /// a full memory barrier like [`Asm::atomic_xchg`] (with `src` 0: an ordered read).
    pub fn atomic_fetch_add(&mut self, dst: Reg, off: i16, src: Reg) {
        self.push(CLASS_STX | MODE_ATOMIC | Size::DW.code(), dst, src, off, ATOMIC_FETCH_ADD);
    }

    /// Calls helper number `id`.
    pub fn call(&mut self, id: i32) {
        self.push(CLASS_JMP | 0x80, Reg(0), Reg(0), 0, id);
    }

    /// Returns `r0`.
    pub fn exit(&mut self) {
        self.push(CLASS_JMP | 0x90, Reg(0), Reg(0), 0, 0);
    }

    /// A new, unbound label.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `label` to the next instruction.
    pub fn bind(&mut self, label: Label) {
        self.labels[label.0] = Some(self.insns.len());
    }

    /// `if dst <cond> imm goto label`.
    pub fn jump_if(&mut self, cond: Cond, dst: Reg, imm: i32, label: Label) {
        self.fixups.push((self.insns.len(), label));
        self.push(CLASS_JMP | jump_op(cond), dst, Reg(0), 0, imm);
    }

    /// `if dst <cond> src goto label`.
    pub fn jump_if_reg(&mut self, cond: Cond, dst: Reg, src: Reg, label: Label) {
        self.fixups.push((self.insns.len(), label));
        self.push(CLASS_JMP | jump_op(cond) | SRC_X, dst, src, 0, 0);
    }

    /// `dst = map` for the map whose descriptor is `map_fd` (`BPF_LD | BPF_IMM | BPF_DW` with
    /// `BPF_PSEUDO_MAP_FD`: two instruction slots).
    pub fn load_map_fd(&mut self, dst: Reg, map_fd: i32) {
        self.push(CLASS_LD | MODE_IMM | Size::DW.code(), dst, Reg(PSEUDO_MAP_FD), 0, map_fd);
        self.push(0, Reg(0), Reg(0), 0, 0);
    }

    /// `goto label`.
    pub fn jump(&mut self, label: Label) {
        self.fixups.push((self.insns.len(), label));
        self.push(CLASS_JMP, Reg(0), Reg(0), 0, 0);
    }

    /// Instructions emitted so far.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// Whether nothing was emitted.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// The program, jumps resolved; `None` if a label was never bound or a jump is too far.
    pub fn finish(mut self) -> Option<Vec<u64>> {
        for &(at, label) in &self.fixups {
            let target = self.labels[label.0]?;
            let off = i16::try_from(target as i64 - at as i64 - 1).ok()?;
            let mut insn = Insn::from_word(self.insns[at]);
            insn.off = off;
            self.insns[at] = insn.to_word();
        }
        Some(self.insns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_the_kernel_headers() {
        let mut a = Asm::default();
        let out = a.label();
        a.mov(R6, R1); // 0xbf 0x16
        a.load(Size::DW, R2, R6, 8); // 0x79 0x62 off 8
        a.jump_if(Cond::Eq, R2, 0, out); // 0x15 0x02 off 1
        a.store_imm(Size::W, R10, -4, 7); // 0x62 0x0a off -4 imm 7
        a.bind(out);
        a.mov_imm(R0, 0); // 0xb7
        a.exit(); // 0x95
        let p = a.finish().unwrap();
        let bytes: Vec<[u8; 8]> = p.iter().map(|i| i.to_ne_bytes()).collect();
        assert_eq!(bytes[0][..2], [0xbf, 0x16]);
        assert_eq!(bytes[1][..2], [0x79, 0x62]);
        assert_eq!(i16::from_ne_bytes([bytes[1][2], bytes[1][3]]), 8);
        assert_eq!(bytes[2][0], 0x15);
        assert_eq!(i16::from_ne_bytes([bytes[2][2], bytes[2][3]]), 1);
        assert_eq!(bytes[3][..2], [0x62, 0x0a]);
        assert_eq!(i16::from_ne_bytes([bytes[3][2], bytes[3][3]]), -4);
        assert_eq!(bytes[4][0], 0xb7);
        assert_eq!(bytes[5][0], 0x95);
    }

    /// Golden bytes, checked against `include/uapi/linux/bpf.h` / `bpf_common.h` by hand.
    #[test]
    fn golden_bytes() {
        let mut a = Asm::default();
        let l = a.label();
        a.load(Size::W, R2, R1, 0); // BPF_LDX | BPF_MEM | BPF_W
        a.load(Size::H, R5, R2, 12); // BPF_LDX | BPF_MEM | BPF_H
        a.add_imm(R4, 42); // BPF_ALU64 | BPF_ADD | BPF_K
        a.jump_if_reg(Cond::Gt, R4, R3, l); // BPF_JMP | BPF_JGT | BPF_X
        a.jump_if(Cond::Ne, R5, 0x0008, l); // BPF_JMP | BPF_JNE | BPF_K
        a.load_map_fd(R1, 3); // BPF_LD | BPF_IMM | BPF_DW, src = BPF_PSEUDO_MAP_FD
        a.call(51); // BPF_JMP | BPF_CALL
        a.bind(l);
        a.atomic_xchg(R9, 16, R2); // BPF_STX | BPF_ATOMIC | BPF_DW, imm BPF_XCHG
        a.atomic_fetch_add(R8, -8, R3); // imm BPF_ADD | BPF_FETCH
        a.exit();
        let bytes: Vec<[u8; 8]> =
            a.finish().unwrap().iter().map(|&w| Insn::from_word(w).encode()).collect();
        assert_eq!(bytes[0], [0x61, 0x12, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes[1], [0x69, 0x25, 12, 0, 0, 0, 0, 0]);
        assert_eq!(bytes[2], [0x07, 0x04, 0, 0, 42, 0, 0, 0]);
        assert_eq!(bytes[3], [0x2d, 0x34, 4, 0, 0, 0, 0, 0]);
        assert_eq!(bytes[4], [0x55, 0x05, 3, 0, 8, 0, 0, 0]);
        assert_eq!(bytes[5], [0x18, 0x11, 0, 0, 3, 0, 0, 0]);
        assert_eq!(bytes[6], [0; 8]);
        assert_eq!(bytes[7], [0x85, 0x00, 0, 0, 51, 0, 0, 0]);
        assert_eq!(bytes[8], [0xdb, 0x29, 16, 0, 0xe1, 0, 0, 0]);
        assert_eq!(bytes[9], [0xdb, 0x38, 0xf8, 0xff, 0x01, 0, 0, 0]);
        assert_eq!(bytes[10], [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn words_decode_to_what_was_encoded() {
        let insn = Insn { code: 0x7b, dst: 10, src: 0, off: -16, imm: -1 };
        assert_eq!(Insn::from_word(insn.to_word()), insn);
        assert_eq!(insn.encode(), [0x7b, 0x0a, 0xf0, 0xff, 0xff, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn jumps_out_of_range_fail() {
        let mut a = Asm::default();
        let l = a.label();
        a.jump(l);
        for _ in 0..40_000 {
            a.exit();
        }
        a.bind(l);
        assert!(a.finish().is_none());
    }

    #[test]
    fn unbound_labels_fail() {
        let mut a = Asm::default();
        let l = a.label();
        a.jump(l);
        assert!(a.finish().is_none());
    }
}
