//! Dirty marks: the tracked poll ([`super::tracked`]) visits only the sockets that changed.
//! Walking every tracked socket's storage costs ~0.5 µs per socket with cold caches (5 ms at
//! 10,000 connections, before any field is read), so a poll that visits every socket cannot
//! stay within a few per cent of a core at 100 ms. Instead the kernel tells which ones moved:
//!
//! - **Marking.** A `tp_btf` program on each tracepoint of [`HOOKS`] (and the
//!   `inet_sock_set_state` program that tracks new connections) looks up the socket's tracked
//!   storage; an untracked socket ends there. A tracked one whose dirty word is clear gets it
//!   set (an atomic exchange) and an element in the *dirty map*, a second socket-storage map
//!   that holds one element per socket dirtied since it was last read. Marking an already
//!   dirty socket costs the lookup and one load. Tracepoints, not `fexit` programs on the
//!   functions that change a socket: a kernel may refuse BPF trampolines (this project's CI
//!   kernel answers EPERM to any `fentry`/`fexit` load), while `tp_btf` programs run wherever
//!   the tracked poll itself does.
//! - **The dirty poll** walks the dirty map (`iter/bpf_sk_storage_map`: nearly free when it
//!   is empty). Per socket it clears the dirty word first (an atomic exchange, a full
//!   barrier), then does what the full walk does for one socket: the change witness, the
//!   rebuild, the comparison, the record written (a socket that left `ESTABLISHED` writes a
//!   [`super::tracked::GONE`] record). A socket that must be read again (locked at either end
//!   of the reads, its witness moved during them, a clock running, TX in flight, or its
//!   record lost to a full buffer: the rebuild flag of [`super::witness`]) gets its dirty word
//!   set again. A second walk over the dirty map, the trim ([`Walk::Trim`]), then deletes
//!   the elements of sockets whose word is clear, and reads those sockets again: the element
//!   is charged to the socket's option memory (`sk_omem_alloc`, which the record holds), so
//!   each record says what the kernel reports at the end of the poll. (Deleting in the first
//!   walk would read a busy socket without the element it has again between polls.) A
//!   deletion shifts the positions the kernel resumes a walk by after each full buffer, so
//!   the trim may skip an element: that socket keeps it, as its record says, and is trimmed
//!   at a later poll.
//! - **Why nothing a hook sees is lost.** A hook fires inside the socket lock held around
//!   the change (receive processing, a send's round, transmission, a read, the state change:
//!   the spinlock in softirq, or the socket owned by a process), or after the change (a drop
//!   charged to the socket). A poll that cleared the word after the hook set it reads after
//!   the change, or finds the socket locked at one end of its reads (or its witness moved in
//!   between) and marks it again. The trim re-checks the word after each delete (an atomic
//!   read): a hook that marked the socket meanwhile gets its element created again.
//! - **The sweep.** Every `--sweep` period (and at the first poll) the recorder polls every
//!   tracked socket with the full witness walk ([`super::tracked::TrackedDumper::poll`]),
//!   which also marks for the next poll each socket it must read again, and gives its dirty
//!   element back to a socket left marked without one (the kernel refused the element: the
//!   socket's option memory at `optmem_max`, or an atomic allocation failed). A change made
//!   through a writer no hook covers ([`UNHOOKED`]: setsockopt above all) is found by the next
//!   sweep.

use super::asm::{Asm, Cond, Label, R0, R1, R2, R3, R4, R6, R7, R8, R9, R10, Reg, Size};

const HELPER_GET_SOCKET_COOKIE: i32 = 46;
pub(super) const HELPER_SK_STORAGE_GET: i32 = 107;
const HELPER_SK_STORAGE_DELETE: i32 = 108;
/// `BPF_SK_STORAGE_GET_F_CREATE`.
pub(super) const F_CREATE: i32 = 1;

/// Where a hook's tracepoint passes the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SockArg {
    /// Argument `n` is the `struct sock *`.
    Sock(u8),
    /// Argument `n` is a `struct sk_buff *`; its owner (`skb->sk`) is the socket.
    SkbOwner(u8),
}

/// A tracepoint a marking `tp_btf` program is attached to, and the writers of record values
/// whose changes pass through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    /// The tracepoint (its `btf_trace_<name>` typedef is the attach point).
    pub tracepoint: &'static str,
    /// Where its socket is.
    pub sock: SockArg,
    /// What changes pass through it, and where it fires.
    pub covers: &'static str,
}

/// Every tracepoint a marking program is attached to. With the `inet_sock_set_state`
/// tracepoint (every state change: connect, accept, shutdown, close, abort, reset, timeout,
/// disconnect) they cover the writers of record values ([`super::witness::COVERAGE`]) except
/// those in [`UNHOOKED`].
pub const HOOKS: &[Hook] = &[
    Hook {
        tracepoint: "tcp_probe",
        sock: SockArg::Sock(0),
        covers: "every segment an established socket processes (tcp_rcv_established, in \
                 softirq or from the backlog when the owner releases the socket), inside the \
                 lock: data, ACKs (congestion control, RTT, SACK, rate sample, ECN, BBR's \
                 model), window updates, and what their processing sends or queues",
    },
    Hook {
        tracepoint: "net_dev_queue",
        sock: SockArg::SkbOwner(0),
        covers: "every segment the socket transmits, when it reaches a device queue (data, \
                 ACKs, probes, FIN, RST to its peer), inside the transmitting path's lock: \
                 segs_out, snd_nxt, the send timestamps, the timers it arms, and what the \
                 timer or callback that sent it changed (delayed ACK, keepalive and \
                 zero-window probes, loss probe, TSQ, pacing)",
    },
    Hook {
        tracepoint: "tcp_retransmit_skb",
        sock: SockArg::Sock(0),
        covers: "every retransmission, also one that fails to reach a device (RTO timer, \
                 RACK, TLP, SACK recovery), inside the lock",
    },
    Hook {
        tracepoint: "tcp_cong_state_set",
        sock: SockArg::Sock(0),
        covers: "every congestion-state change (Open, Disorder, CWR, Recovery, Loss), also \
                 the RTO timer's, inside the lock",
    },
    Hook {
        tracepoint: "tcp_sendmsg_locked",
        sock: SockArg::Sock(0),
        covers: "every round of tcp_sendmsg_locked (send, write, sendfile, splice to a socket, \
                 io_uring, kTLS, MPTCP), inside the lock before that round's changes: \
                 write_seq, the send queue and memory, sndbuf-limited time started, what it \
                 transmits; a send that sleeps for memory starts a new round when it wakes",
    },
    Hook {
        tracepoint: "tcp_rcv_space_adjust",
        sock: SockArg::Sock(0),
        covers: "every read (recvmsg, also MSG_PEEK; splice, read_sock users, zero-copy \
                 receive), inside the lock, after the data was consumed: copied_seq, the \
                 receive queue and memory, receive-buffer autotuning, the ACK it sends",
    },
    Hook {
        tracepoint: "kfree_skb",
        sock: SockArg::Sock(3),
        covers: "a segment dropped and charged to the socket (socket filter, minimum TTL, \
                 MD5/AO signature, full backlog), after sk_drops moved",
    },
];

/// The writers of record values no hook covers, and how their changes are still recorded.
/// A sweep ([`super::tracked::TrackedDumper::poll`]) reads every tracked socket, so each
/// change marked "the sweep" is recorded within one sweep period.
pub const UNHOOKED: &[(&str, &str)] = &[
    (
        "setsockopt (SO_SNDBUF, SO_RCVBUF, SO_KEEPALIVE, SO_MAX_PACING_RATE, SO_BINDTODEVICE, \
         TCP_CONGESTION, TCP_WINDOW_CLAMP, TCP_RTO_MIN, ...) that transmits nothing",
        "the sweep",
    ),
    (
        "timers that fire without transmitting, retransmitting or changing the congestion \
         state: the keepalive timer re-arming itself, a zero-window or keepalive probe that \
         could not be allocated, a delayed ACK that could not be, memory reclaim",
        "the sweep",
    ),
    (
        "ICMP handled without a retransmission: a PMTU reduction with nothing to resend, an \
         RTO backoff reverted",
        "the sweep",
    ),
    (
        "a segment queued to the backlog while a process owns the socket (backlog length)",
        "recorded when the owner releases the socket and the backlog is processed (tcp_probe)",
    ),
    (
        "TX completion freeing transmitted skbs (sk_wmem_alloc), lockless, after the transmit",
        "a socket read with TX in flight stays dirty until a poll finds none",
    ),
    ("any writer a future kernel adds outside these paths", "the sweep"),
];

/// Where the dirty marks live, and which map a tracked poll's program walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    /// The tracked sockets' storage map (descriptor).
    pub tracked_fd: i32,
    /// The dirty map (descriptor).
    pub dirty_fd: i32,
    /// Offset of the dirty word (u64) in a tracked socket's storage value.
    pub dirty_at: i16,
    /// Which walk the program is.
    pub walk: Walk,
}

/// The walks of a tracked poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// Over the tracked map: every tracked socket ([`super::tracked::TrackedDumper::poll`]).
    Sweep,
    /// Over the dirty map: each marked socket's mark cleared, then read.
    Dirty,
    /// Over the dirty map after a dirty walk: each socket left unmarked loses its element
    /// and is read again (the element was charged to its option memory, a recorded value).
    Trim,
}

impl Marks {
    /// `dst` = the tracked storage value of the socket in `r7`: `ctx->value` when walking
    /// the tracked map, a lookup when walking the dirty map. Jumps to `out` without one.
    /// Clobbers `r0`-`r5`.
    pub(super) fn emit_value(&self, a: &mut Asm, dst: Reg, out: Label) {
        if self.walk != Walk::Sweep {
            emit_storage_get(a, self.tracked_fd, R7, 0);
            a.jump_if(Cond::Eq, R0, 0, out);
            a.mov(dst, R0);
        } else {
            a.load(Size::DW, dst, R6, 24); // ctx->value
            a.jump_if(Cond::Eq, dst, 0, out);
        }
    }

    /// The start of the trim's program for the socket in `r7`: a socket still marked keeps its
    /// element (the next dirty poll reads it) and the program ends at `out`; any other loses
    /// it, and the mark is read again (an atomic read, after the delete): a socket a hook
    /// marked in between gets its element back and ends at `out` too. The socket that falls
    /// through is read again, as the dirty walk reads one: its element was charged to its
    /// option memory (`sk_omem_alloc`, a recorded value), so the record the dirty walk
    /// wrote moved when the element went. Clobbers `r0`-`r5`, `r9`.
    pub(super) fn emit_trim_start(&self, a: &mut Asm, out: Label) {
        let untracked = a.label();
        let clean = a.label();
        emit_storage_get(a, self.tracked_fd, R7, 0);
        a.jump_if(Cond::Eq, R0, 0, untracked);
        a.mov(R9, R0);
        a.load(Size::DW, R2, R9, self.dirty_at);
        a.jump_if(Cond::Ne, R2, 0, out);
        emit_storage_delete(a, self.dirty_fd, R7);
        a.mov_imm(R2, 0);
        a.atomic_fetch_add(R9, self.dirty_at, R2);
        a.jump_if(Cond::Eq, R2, 0, clean);
        emit_storage_get(a, self.dirty_fd, R7, F_CREATE);
        a.jump(out);
        a.bind(untracked);
        emit_storage_delete(a, self.dirty_fd, R7);
        a.jump(out);
        a.bind(clean);
    }

    /// The end of a marking program: `r0` holds the tracked storage value of the socket in
    /// `r7` (NULL: not tracked), which is marked ([`Marks::emit_mark`], atomically: hooks run
    /// beside polls); `out` is bound here, and the program returns 0.
    pub(super) fn emit_hook_end(&self, a: &mut Asm, out: Label) {
        a.jump_if(Cond::Eq, R0, 0, out);
        a.mov(R8, R0);
        self.emit_mark(a, R8, R7, out, true);
        a.bind(out);
        a.mov_imm(R0, 0);
        a.exit();
    }

    /// Marks the socket in `sk`, whose tracked storage value is in `value`, dirty (unless it
    /// is): sets the dirty word and gives it a dirty-map element. `atomic` where a trim may
    /// run at the same time (the hooks): the exchange orders the element's lookup after the
    /// word. Falls through or jumps to `done`; clobbers `r0`-`r5`.
    pub(super) fn emit_mark(&self, a: &mut Asm, value: Reg, sk: Reg, done: Label, atomic: bool) {
        a.load(Size::DW, R2, value, self.dirty_at);
        a.jump_if(Cond::Ne, R2, 0, done);
        a.mov_imm(R2, 1);
        if atomic {
            a.atomic_xchg(value, self.dirty_at, R2);
            a.jump_if(Cond::Ne, R2, 0, done);
        } else {
            a.store(Size::DW, value, self.dirty_at, R2);
        }
        emit_storage_get(a, self.dirty_fd, sk, F_CREATE);
    }
}

/// `bpf_sk_storage_delete(map, sk)`; clobbers `r0`-`r5`.
fn emit_storage_delete(a: &mut Asm, map_fd: i32, sk: Reg) {
    a.mov(R2, sk);
    a.load_map_fd(R1, map_fd);
    a.call(HELPER_SK_STORAGE_DELETE);
}

/// `r0 = bpf_sk_storage_get(map, sk, NULL, flags)`; clobbers `r1`-`r5`.
pub(super) fn emit_storage_get(a: &mut Asm, map_fd: i32, sk: Reg, flags: i32) {
    a.mov(R2, sk);
    a.load_map_fd(R1, map_fd);
    a.mov_imm(R3, 0);
    a.mov_imm(R4, flags);
    a.call(HELPER_SK_STORAGE_GET);
}

/// The program of `hook`: its socket, if tracked, is marked. `skb_sk` is `sk_buff.sk`'s
/// offset.
/// `sk_storage` is `sock.sk_bpf_storage`'s offset: a socket without any storage (most of a
/// host's) ends there, without a helper call.
pub fn mark_program(marks: &Marks, hook: &Hook, skb_sk: u32, sk_storage: u32) -> Option<Vec<u64>> {
    let mut a = Asm::default();
    let out = a.label();
    match hook.sock {
        SockArg::Sock(n) => a.load(Size::DW, R7, R1, i16::from(n) * 8),
        SockArg::SkbOwner(n) => {
            a.load(Size::DW, R7, R1, i16::from(n) * 8);
            a.jump_if(Cond::Eq, R7, 0, out);
            a.load(Size::DW, R7, R7, i16::try_from(skb_sk).ok()?);
        }
    }
    a.jump_if(Cond::Eq, R7, 0, out);
    a.load(Size::DW, R2, R7, i16::try_from(sk_storage).ok()?);
    a.jump_if(Cond::Eq, R2, 0, out);
    emit_storage_get(&mut a, marks.tracked_fd, R7, 0);
    marks.emit_hook_end(&mut a, out);
    a.finish()
}

/// Over the dirty map: each element's socket cookie (8 bytes), for tests and the benchmark.
pub fn cookies_program() -> Option<Vec<u64>> {
    let mut a = Asm::default();
    let out = a.label();
    a.mov(R6, R1);
    a.load(Size::DW, R7, R6, 16); // ctx->sk
    a.jump_if(Cond::Eq, R7, 0, out);
    a.mov(R1, R7);
    a.call(HELPER_GET_SOCKET_COOKIE);
    a.store(Size::DW, R10, -8, R0);
    super::program::emit_seq_write(&mut a, -8, 8);
    a.bind(out);
    a.mov_imm(R0, 0);
    a.exit();
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_is_a_tracepoint_of_the_running_kernel() {
        let blob =
            std::fs::read("/sys/kernel/btf/vmlinux").expect("kernel BTF (CI kernels have it)");
        let btf = super::super::btf::Btf::parse(&blob).unwrap();
        for h in HOOKS {
            let typedef = format!("btf_trace_{}", h.tracepoint);
            assert!(btf.typedef_id(&typedef).is_ok(), "{typedef} is not in this kernel's BTF");
        }
    }

    #[test]
    fn the_programs_assemble() {
        let marks = Marks { tracked_fd: 3, dirty_fd: 4, dirty_at: 512, walk: Walk::Dirty };
        assert!(HOOKS.iter().all(|h| mark_program(&marks, h, 24, 600).is_some()));
        assert!(cookies_program().is_some());
    }
}
