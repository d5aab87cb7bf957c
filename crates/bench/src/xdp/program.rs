//! The XDP program of the AF_XDP engine, assembled here as eBPF bytecode: no C compiler, no
//! BPF toolchain, no object file, no libbpf at build or run time (this machine has neither
//! clang nor bpftool, and the program is 24 instructions).
//!
//! What it does, per received frame (the seed's "any traffic that is not critical to the
//! hotpath ... could be routed to the kernel"):
//!
//! ```text
//! if the frame is Ethernet + IPv4 without options, unfragmented, UDP, to `port`:
//!     redirect it to the AF_XDP socket of its receive queue (XSKMAP[rx_queue_index]),
//!     or pass it to the kernel if that queue has no socket
//! else:
//!     pass it to the kernel (ARP, TCP, other UDP ports, ...)
//! ```

use tcptail_bpf::asm::{Asm, Cond, R0, R1, R2, R3, R4, R5, Size};

/// `XDP_PASS`: hand the frame to the kernel's stack.
pub const XDP_PASS: i32 = 2;
/// The `bpf_redirect_map` helper's number.
const HELPER_REDIRECT_MAP: i32 = 51;

/// Length of the headers the program reads: Ethernet (14) + IPv4 (20) + UDP (8).
pub const MATCHED_HEADERS: i32 = 42;

/// A 16-bit field in network order, as a little-endian 16-bit load sees it.
const fn net16(v: u16) -> i32 {
    v.swap_bytes() as i32
}

/// The program for UDP destination `port`, redirecting through the XSKMAP `map_fd`
/// (`struct bpf_insn`s as [`Asm::finish`] returns them).
pub fn redirect_udp_port(port: u16, map_fd: i32) -> Vec<u64> {
    // Registers: r1 ctx (struct xdp_md), r2 data, r3 data_end, r4/r5 scratch.
    let mut a = Asm::default();
    let pass = a.label();
    a.load(Size::W, R2, R1, 0); // r2 = ctx->data
    a.load(Size::W, R3, R1, 4); // r3 = ctx->data_end
    a.mov(R4, R2);
    a.add_imm(R4, MATCHED_HEADERS);
    a.jump_if_reg(Cond::Gt, R4, R3, pass); // too short for the headers: pass
    a.load(Size::H, R5, R2, 12); // EtherType
    a.jump_if(Cond::Ne, R5, net16(0x0800), pass);
    a.load(Size::B, R5, R2, 14); // IPv4, 20-byte header
    a.jump_if(Cond::Ne, R5, 0x45, pass);
    a.load(Size::B, R5, R2, 23); // protocol
    a.jump_if(Cond::Ne, R5, 17, pass);
    a.load(Size::H, R5, R2, 20); // flags + fragment offset: no fragments
    a.and_imm(R5, net16(0x3fff));
    a.jump_if(Cond::Ne, R5, 0, pass);
    a.load(Size::H, R5, R2, 36); // UDP destination port
    a.jump_if(Cond::Ne, R5, net16(port), pass);
    a.load(Size::W, R2, R1, 16); // r2 = ctx->rx_queue_index (key)
    a.load_map_fd(R1, map_fd); // r1 = the XSKMAP
    a.mov_imm(R3, XDP_PASS); // no socket on that queue: pass
    a.call(HELPER_REDIRECT_MAP);
    a.exit();
    // The pass label: every jump above lands here.
    a.bind(pass);
    a.mov_imm(R0, XDP_PASS);
    a.exit();
    a.finish().expect("every label is bound and every jump is short")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptail_bpf::asm::Insn;

    // Operation codes the program uses (BPF_CLASS | BPF_SIZE/OP | BPF_MODE/SRC).
    const LDX_W: u8 = 0x61;
    const LDX_H: u8 = 0x69;
    const LDX_B: u8 = 0x71;
    const MOV64_REG: u8 = 0xbf;
    const MOV64_IMM: u8 = 0xb7;
    const ADD64_IMM: u8 = 0x07;
    const AND64_IMM: u8 = 0x57;
    const JGT_REG: u8 = 0x2d;
    const JNE_IMM: u8 = 0x55;
    const LD_IMM64: u8 = 0x18;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;

    /// A tiny interpreter of exactly the instructions above, over one frame: what the kernel
    /// would return (the redirect is modelled as "redirect").
    fn verdict(program: &[u64], frame: &[u8]) -> &'static str {
        let program: Vec<Insn> = program.iter().map(|&w| Insn::from_word(w)).collect();
        let mut r = [0i64; 11];
        let mut pc = 0usize;
        // ctx: data at 0, data_end = len, rx_queue_index 0; memory is the frame.
        loop {
            let i = program[pc];
            let (d, s) = (i.dst as usize, i.src as usize);
            let load = |addr: i64, n: usize| -> i64 {
                let a = addr as usize;
                let mut v = 0i64;
                for k in (0..n).rev() {
                    v = (v << 8) | i64::from(frame[a + k]);
                }
                v
            };
            pc += 1;
            match i.code {
                LDX_W if s == 1 => {
                    r[d] = match i.off {
                        0 => 0,
                        4 => frame.len() as i64,
                        16 => 0,
                        o => panic!("ctx offset {o}"),
                    }
                }
                LDX_H => r[d] = load(r[s] + i64::from(i.off), 2),
                LDX_B => r[d] = load(r[s] + i64::from(i.off), 1),
                MOV64_REG => r[d] = r[s],
                MOV64_IMM => r[d] = i64::from(i.imm),
                ADD64_IMM => r[d] += i64::from(i.imm),
                AND64_IMM => r[d] &= i64::from(i.imm),
                JGT_REG if r[d] > r[s] => pc = (pc as i64 + i64::from(i.off)) as usize,
                JNE_IMM if r[d] != i64::from(i.imm) => pc = (pc as i64 + i64::from(i.off)) as usize,
                JGT_REG | JNE_IMM => {}
                LD_IMM64 => pc += 1,
                CALL => return "redirect",
                EXIT => return if r[0] == i64::from(XDP_PASS) { "pass" } else { "other" },
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    fn udp_frame(port: u16) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[23] = 17;
        f[36..38].copy_from_slice(&port.to_be_bytes());
        f
    }

    #[test]
    fn only_unfragmented_ipv4_udp_to_the_port_is_redirected() {
        let p = redirect_udp_port(9999, 7);
        assert_eq!(verdict(&p, &udp_frame(9999)), "redirect");
        assert_eq!(verdict(&p, &udp_frame(9998)), "pass");
        let mut tcp = udp_frame(9999);
        tcp[23] = 6;
        assert_eq!(verdict(&p, &tcp), "pass");
        let mut arp = udp_frame(9999);
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(verdict(&p, &arp), "pass");
        let mut options = udp_frame(9999);
        options[14] = 0x46;
        assert_eq!(verdict(&p, &options), "pass");
        let mut fragment = udp_frame(9999);
        fragment[20] = 0x20; // more fragments
        assert_eq!(verdict(&p, &fragment), "pass");
        let mut df = udp_frame(9999);
        df[20] = 0x40; // don't fragment: still one whole datagram
        assert_eq!(verdict(&p, &df), "redirect");
        assert_eq!(verdict(&p, &udp_frame(9999)[..41]), "pass", "short frame");
    }

    #[test]
    fn encoding_puts_registers_in_nibbles_and_patches_every_jump() {
        let p: Vec<Insn> = redirect_udp_port(1, 3).into_iter().map(Insn::from_word).collect();
        assert_eq!(p[0].encode(), [0x61, 0x12, 0, 0, 0, 0, 0, 0]);
        let ld = p.iter().find(|i| i.code == LD_IMM64).unwrap();
        assert_eq!(ld.encode()[1], 0x11);
        assert_eq!(ld.imm, 3);
        // Every jump is patched to the pass label (the last two instructions).
        let pass_at = (p.len() - 2) as i64;
        for (at, i) in p.iter().enumerate().filter(|(_, i)| matches!(i.code, JGT_REG | JNE_IMM)) {
            assert_eq!(at as i64 + 1 + i64::from(i.off), pass_at, "jump at {at}");
        }
        assert_eq!(p.len(), 24);
    }
}
