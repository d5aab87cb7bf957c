//! The tracked poll's change witness: a few dozen `tcp_sock` words, on a few cache lines,
//! that move whenever any value of the record ([`super::record`]) can move. A poll reads the
//! witness of each tracked socket and rebuilds and compares the whole record
//! ([`super::program`]'s `Target::Tracked`) only when the witness moved, when the socket was
//! locked, or when the poll before could not trust what it read; every other socket is
//! [`super::tracked::ALIVE`] without its ~100 fields, its inode chain or the 500-byte compare.
//!
//! **Why it is exact.** Every record value is in one of two classes ([`COVERAGE`]):
//! - `Own`: the value itself is in the witness (compared raw, at its kernel size), because
//!   some path changes it without moving anything else: `setsockopt` (buffer sizes, pacing
//!   rate, window clamp, keepalive, `TCP_CONGESTION`, `SO_BINDTODEVICE`, RTO minimum, delayed
//!   ACK maximum), lockless updates (`sk_drops`, `sk_wmem_alloc` on TX completion), timers
//!   that fire without sending, `accept` grafting the file (the inode), `MSG_PEEK` reads (the
//!   receive-space estimate). Values that share a cache line with such a value are taken as
//!   well: the line is read anyway.
//! - `Ticks`: the value is written only on paths that also move a witnessed value: a segment
//!   received (`segs_in`, counted in `tcp_v4_rcv`/`tcp_v6_rcv` under the socket lock before
//!   the segment is processed or queued to the backlog), a segment transmitted (`segs_out`,
//!   added in `__tcp_transmit_skb` before the device sees it, so a local drop after it still
//!   moved it), data queued by `sendmsg` (`write_seq`) or consumed by `recvmsg` (`copied_seq`),
//!   a retransmit/probe/loss-probe timer firing (`icsk_pending` cleared, `icsk_backoff`,
//!   `icsk_retransmits`, `icsk_probes_out` or the timer's expiry moved), a state change
//!   (`skc_state`) or a new congestion control (`icsk_ca_ops`). The counters only grow, so
//!   two polls cannot see the same value around a change.
//!
//! **Races.** The iterator takes no socket lock. So a socket whose lock is held (the spinlock
//! of softirq processing, or `owned` by a process, which covers backlog processing, deferred
//! timers and `release_cb`) is rebuilt; and a socket whose witness moved since the last poll,
//! that was locked at either end of the poll's reads, whose witness moved during the poll's
//! reads, or whose clocks run (a chrono or an RTO episode: the record grows with time, see
//! [`super::tracked`]) is rebuilt at the next poll too (the `rebuild` flag stored beside the
//! witness). A change that began before one poll's reads and ended after them is therefore
//! always read again once it has ended.
//!
//! Kernel references: `tcp_get_info` and `tcp_get_info_chrono_stats` (net/ipv4/tcp.c),
//! `inet_sk_diag_fill`, `sk_get_meminfo`, `bbr_get_info`, and the writers of each field in
//! net/ipv4/tcp_{input,output,timer,ipv4}.c, Linux 6.18.

use super::asm::{Asm, Cond, Label, R0, R1, R2, R3, R4, R7, R8, R9, Size};
use super::btf::{Btf, BtfError};
use super::fields::{K, needed};
use super::record::Load;
use crate::wire::Attrs;

/// How a record value's changes reach the witness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The value is in the witness; the text says why it must be.
    Own(&'static str),
    /// The value is not in the witness; the text names the paths that write it and what
    /// witnessed value each of them moves.
    Ticks(&'static str),
}

use Why::{Own, Ticks};

const LINE: &str = "on a witnessed cache line";
const RX: &str = "receive processing only: segs_in";
const ACK: &str = "ACK processing only (tcp_ack and what it calls): segs_in";
const HANDSHAKE: &str = "set while the handshake completes, in the locked section that makes \
     the socket established and tracked (a poll then finds the socket locked and rebuilds it \
     again after)";

/// Every record value and how its changes are witnessed. A value added to [`K`] must be
/// classified here (a test checks it).
pub const COVERAGE: &[(K, Why)] = &[
    (K::Family, Own("fixed once established; skc_state's line")),
    (K::State, Own("close, shutdown, abort, timeouts: the state itself")),
    (K::Num, Own("fixed once established; skc_state's line")),
    (K::Dport, Own("cleared by tcp_disconnect; skc_state's line")),
    (K::Saddr4, Own("fixed once established; skc_state's line")),
    (K::Daddr4, Own("fixed once established; skc_state's line")),
    (K::BoundDevIf, Own("SO_BINDTODEVICE at any time")),
    (K::PacingRate, Own("SO_MAX_PACING_RATE lowers it")),
    (K::MaxPacingRate, Own("SO_MAX_PACING_RATE")),
    (K::Reordering, Own(LINE)),
    (K::SndCwnd, Own(LINE)),
    (
        K::AckBacklog,
        Ticks(
            "a listener's: listen() and accept() only; a tracked socket listens only after a state change",
        ),
    ),
    (K::MaxAckBacklog, Ticks("listen() only, after a state change")),
    (K::CaState, Own("tcp_enter_loss from the RTO timer, local congestion")),
    (K::Retransmits, Own("timers")),
    (K::ProbesOut, Own("zero-window and keepalive probes, also when no probe could be sent")),
    (K::Backoff, Own("timers, ICMP RTO revert")),
    (K::Pending, Own("timers armed and fired")),
    (K::TstampOk, Own(LINE)),
    (K::SackOk, Own(LINE)),
    (K::WscaleOk, Own(LINE)),
    (K::SndWscale, Own(LINE)),
    (K::RcvWscale, Own(LINE)),
    (
        K::EcnFlags,
        Ticks(
            "set in the handshake; DEMAND_CWR and CWR flags on receipt (segs_in); QUEUE_CWR by \
             tcp_enter_cwr/loss (ACK, RTO timer, or a local drop after segs_out) and cleared \
             when CWR is sent (segs_out)",
        ),
    ),
    (K::SynDataAcked, Ticks(HANDSHAKE)),
    (K::UsecTs, Own(LINE)),
    (K::SynFastopenChild, Ticks("set when the child is created")),
    (K::Rto, Own("timers; ACK processing")),
    (K::Ato, Own("delayed-ACK timer, also when the ACK cannot be allocated")),
    (K::DelackMax, Own("TCP_BPF_DELACK_MAX")),
    (K::RtoMin, Own("TCP_RTO_MIN at any time")),
    (K::MssCache, Own(LINE)),
    (K::RcvMss, Own(LINE)),
    (K::PacketsOut, Own(LINE)),
    (K::SackedOut, Own(LINE)),
    (K::LostOut, Own("PMTU reduction from an ICMP message marks segments lost")),
    (
        K::RetransOut,
        Ticks(
            "added when a retransmission was transmitted (segs_out); lowered by ACK/SACK \
             processing (segs_in); cleared by tcp_enter_loss (RTO timer: icsk_pending, \
             backoff) or a PMTU reduction (icsk_pmtu_cookie), a purge (skc_state)",
        ),
    ),
    (K::Lsndtime, Own(LINE)),
    (K::Lrcvtime, Own(LINE)),
    (K::RcvTstamp, Own(LINE)),
    (K::Pmtu, Own("ICMP fragmentation needed")),
    (K::RcvSsthresh, Own("TCP_WINDOW_CLAMP")),
    (K::SrttUs, Own(LINE)),
    (K::MdevUs, Own(LINE)),
    (
        K::SndSsthresh,
        Ticks(
            "ACK processing (segs_in); RTO, loss-probe and probe timers (icsk_pending, \
             expiry); tcp_enter_cwr on a local drop and the restart/application-limited \
             adjustments after sending (segs_out); sockops callbacks run inside those paths; \
             tcp_disconnect (skc_state)",
        ),
    ),
    (K::Advmss, Ticks(HANDSHAKE)),
    (K::RcvRtt, Own(LINE)),
    (K::RcvSpace, Own("tcp_rcv_space_adjust also runs on MSG_PEEK reads")),
    (
        K::TotalRetrans,
        Ticks("added after a retransmission was transmitted (segs_out); reset with skc_state"),
    ),
    (K::BytesAcked, Own(LINE)),
    (K::BytesReceived, Own(LINE)),
    (K::WriteSeq, Own("sendmsg; TCP_REPAIR_QUEUE")),
    (K::SndNxt, Own(LINE)),
    (K::SndUna, Own(LINE)),
    (K::RcvNxt, Own(LINE)),
    (K::CopiedSeq, Own("recvmsg, splice, zero-copy receive")),
    (K::Chrono0, Own(LINE)),
    (K::Chrono1, Own(LINE)),
    (K::Chrono2, Own(LINE)),
    (K::ChronoType, Own("the running clock: a running chrono rebuilds every poll")),
    (K::ChronoStart, Own(LINE)),
    (K::SegsOut, Own("the transmit tick")),
    (K::SegsIn, Own("the receive tick")),
    (K::MinRtt, Ticks("ACK processing (tcp_update_rtt_min): segs_in; reset with skc_state")),
    (K::DataSegsIn, Own(LINE)),
    (K::DataSegsOut, Own(LINE)),
    (K::RateAppLimited, Ticks("tcp_rate_gen in ACK processing: segs_in; reset with skc_state")),
    (K::RateDelivered, Own(LINE)),
    (K::RateIntervalUs, Own(LINE)),
    (K::Delivered, Own(LINE)),
    (K::DeliveredCe, Own(LINE)),
    (K::BytesSent, Own(LINE)),
    (
        K::BytesRetrans,
        Ticks("added after a retransmission was transmitted (segs_out); reset with skc_state"),
    ),
    (K::DsackDups, Ticks(ACK)),
    (
        K::ReordSeen,
        Ticks("ACK processing (segs_in) and the RACK reordering timer (icsk_pending, expiry)"),
    ),
    (K::RcvOoopack, Ticks(RX)),
    (K::SndWnd, Own(LINE)),
    (K::RcvWnd, Own("TCP_REPAIR_WINDOW")),
    (K::PlbRehash, Ticks(ACK)),
    (K::TimeoutRehash, Ticks("the RTO timer: icsk_pending, backoff, expiry")),
    (K::FastopenClientFail, Ticks(HANDSHAKE)),
    (K::TotalRto, Ticks("the RTO timer: icsk_pending, backoff, expiry")),
    (
        K::TotalRtoRecoveries,
        Ticks("the end of an RTO episode, seen by the rebuild every poll while rto_stamp is set"),
    ),
    (
        K::TotalRtoTime,
        Ticks("the end of an RTO episode, seen by the rebuild every poll while rto_stamp is set"),
    ),
    (
        K::RtoStamp,
        Ticks(
            "set by the RTO timer (icsk_pending, backoff, expiry); while set every poll \
             rebuilds, which sees it cleared",
        ),
    ),
    (K::AccecnFailMode, Ticks("AccECN negotiation and option checks on receipt: segs_in")),
    (K::SawAccecnOpt, Ticks(RX)),
    (K::ReceivedCe, Ticks(RX)),
    (K::DeliveredE1, Own(LINE)),
    (K::DeliveredE0, Own(LINE)),
    (K::DeliveredCeBytes, Own(LINE)),
    (K::ReceivedE1, Own(LINE)),
    (K::ReceivedE0, Own(LINE)),
    (K::ReceivedCeBytes, Own(LINE)),
    (K::RmemAlloc, Own("skbs freed by recvmsg, pruning and collapsing")),
    (K::Rcvbuf, Own("SO_RCVBUF, receive-buffer autotuning on MSG_PEEK")),
    (K::WmemAlloc, Own("lockless: TX completion frees skbs")),
    (K::Sndbuf, Own("SO_SNDBUF")),
    (K::ForwardAlloc, Own("memory reclaim from timers")),
    (K::WmemQueued, Own(LINE)),
    (K::OmemAlloc, Own("socket options and filters")),
    (K::BacklogLen, Own("cleared by release_sock after the backlog is processed")),
    (K::Drops, Own("lockless: filtered or unauthenticated segments dropped before segs_in")),
    (K::RetransmitTimerExpires, Own("re-armed by timers")),
    (K::SkTimerExpires, Own("SO_KEEPALIVE, TCP_KEEPIDLE, the keepalive timer")),
    (K::SkTimerPending, Own("SO_KEEPALIVE, the keepalive timer")),
    (
        K::BbrMinRttUs,
        Ticks(
            "BBR's hooks: cong_control (ACK: segs_in), cwnd_event (on transmit: segs_out; on \
             loss: RTO timer or ACK), set_state (icsk_ca_state, or the RTO timer for Loss \
             again), init (a new icsk_ca_ops)",
        ),
    ),
    (K::BbrBw, Ticks("BBR's hooks, as min_rtt_us")),
    (K::BbrLtUseBw, Ticks("BBR's hooks, as min_rtt_us")),
    (K::BbrLtBw, Ticks("BBR's hooks, as min_rtt_us")),
    (K::BbrPacingGain, Ticks("BBR's hooks, as min_rtt_us")),
    (K::BbrCwndGain, Ticks("BBR's hooks, as min_rtt_us")),
];

/// One value the witness compares: where it is in `tcp_sock` and in the stored witness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WitnessLoad {
    /// The record value, or `None` for a word outside the record.
    pub(super) k: Option<K>,
    pub(super) kernel: u32,
    pub(super) size: Size,
    /// Offset in the stored witness.
    pub(super) at: u16,
}

/// The witness of one kernel: what is read, where it is kept beside the stored record.
#[derive(Debug, Clone)]
pub struct Witness {
    /// In kernel address order (the lines are touched in order; the prefetcher follows).
    pub(super) loads: Vec<WitnessLoad>,
    /// `sock.sk_lock.slock` and `sock.sk_lock.owned` (offset, bytes).
    pub(super) lock: [(u32, Size); 2],
    /// Offset of the rebuild flag (u64) in the stored witness.
    pub(super) flag: usize,
    /// Bytes of the stored witness (a multiple of 8).
    pub len: usize,
}

impl Witness {
    /// The witness over the record `loads` (the record values [`COVERAGE`] marks `Own`,
    /// except those in `left_out`) and the words outside the record that a record value
    /// follows: `sk_socket` (the inode: set by accept's graft, cleared by close) and
    /// `icsk_ca_ops` (the congestion control's name and BBR's area).
    pub(super) fn new(btf: &Btf, loads: &[Load], left_out: &[K]) -> Result<Witness, BtfError> {
        let own = |k: K| {
            !left_out.contains(&k)
                && COVERAGE.iter().any(|&(c, why)| c == k && matches!(why, Own(_)))
        };
        let mut words: Vec<(Option<K>, u32, u32)> =
            loads.iter().filter(|l| own(l.k)).map(|l| (Some(l.k), l.kernel, l.bytes)).collect();
        let sk = super::fields::ICSK.to_owned() + "icsk_inet.sk.";
        let at = |path: &str| btf.member("tcp_sock", path);
        for path in [format!("{sk}sk_socket"), format!("{}icsk_ca_ops", super::fields::ICSK)] {
            let m = at(&path)?;
            words.push((None, m.byte_offset(), m.size));
        }
        // Bitfields share their bytes: one load each.
        words.sort_by_key(|&(_, kernel, bytes)| (kernel, std::cmp::Reverse(bytes)));
        words.dedup_by_key(|w| w.1);
        // Stored biggest first, so each is naturally aligned.
        let mut by_size: Vec<usize> = (0..words.len()).collect();
        by_size.sort_by_key(|&i| std::cmp::Reverse(words[i].2));
        let mut stored = vec![0u16; words.len()];
        let mut next = 0u32;
        for i in by_size {
            let bytes = words[i].2;
            next = next.next_multiple_of(bytes);
            stored[i] = next as u16;
            next += bytes;
        }
        let flag = (next as usize).next_multiple_of(8);
        let loads = words
            .iter()
            .zip(stored)
            .map(|(&(k, kernel, bytes), at)| {
                let size = Size::of(bytes).ok_or(BtfError::Malformed("witness word size"))?;
                Ok(WitnessLoad { k, kernel, size, at })
            })
            .collect::<Result<Vec<_>, BtfError>>()?;
        let lock_part = |name: &str| -> Result<(u32, Size), BtfError> {
            let m = at(&format!("{sk}sk_lock.{name}"))?;
            Ok((m.byte_offset(), Size::of(m.size).ok_or(BtfError::Malformed("lock word size"))?))
        };
        Ok(Witness { loads, lock: [lock_part("slock")?, lock_part("owned")?], flag, len: flag + 8 })
    }

    /// The loads a record of `attrs` needs compared.
    fn loads_for(&self, attrs: Attrs) -> impl Iterator<Item = &WitnessLoad> {
        self.loads.iter().filter(move |l| l.k.is_none_or(|k| needed(k, attrs)))
    }

    /// Sets `r4` to 1 when the socket in `r8` is locked; clobbers `r2`.
    fn emit_locked(&self, a: &mut Asm) {
        let locked = a.label();
        let done = a.label();
        for (off, size) in self.lock {
            a.load(size, R2, R8, off as i16);
            a.jump_if(Cond::Ne, R2, 0, locked);
        }
        a.jump(done);
        a.bind(locked);
        a.mov_imm(R4, 1);
        a.bind(done);
    }

    /// The start of a tracked poll's program, for the socket in `r7` whose storage value
    /// holds the record (`record_len` bytes) and then this witness. Reads the witness and
    /// stores what moved. Unless `t.all` (or `t` is the trim, which rebuilds every socket it
    /// reaches), a socket whose witness did not move, that is not locked and whose rebuild
    /// flag is clear gets [`super::tracked::ALIVE`] in a sweep (no record in a dirty poll)
    /// and the program ends at `out`; every other socket falls through to the rebuild with
    /// the flag set to whether the witness moved or the socket is locked
    /// ([`Witness::emit_end`] adds the rest). Clobbers `r0`-`r5`, `r8`, `r9`.
    pub(super) fn emit_start(
        &self,
        a: &mut Asm,
        record_len: usize,
        attrs: Attrs,
        t: &super::program::Tracked,
        out: Label,
    ) -> Option<()> {
        let area = |off: usize| i16::try_from(record_len + off).ok();
        let flag = area(self.flag)?;
        let rebuild = a.label();
        let moved = a.label();
        a.mov(R1, R7);
        a.call(super::program::HELPER_SKC_TO_TCP_SOCK);
        a.jump_if(Cond::Eq, R0, 0, rebuild);
        a.mov(R8, R0);
        t.marks.emit_value(a, R9, out);
        a.mov_imm(R4, 0);
        self.emit_locked(a);
        for l in self.loads_for(attrs) {
            let same = a.label();
            let at = area(usize::from(l.at))?;
            a.load(l.size, R2, R8, i16::try_from(l.kernel).ok()?);
            a.load(l.size, R3, R9, at);
            a.jump_if_reg(Cond::Eq, R2, R3, same);
            a.mov_imm(R4, 1);
            a.store(l.size, R9, at, R2);
            a.bind(same);
        }
        // The trim rebuilds every socket it reaches (its delete moved the option memory).
        if !t.all && t.marks.walk != super::dirty::Walk::Trim {
            a.jump_if(Cond::Ne, R4, 0, moved);
            a.load(Size::DW, R3, R9, flag);
            a.jump_if(Cond::Ne, R3, 0, moved);
            // Unchanged: a sweep says it lives; a dirty poll has nothing to say.
            if t.marks.walk == super::dirty::Walk::Sweep {
                super::program::emit_cookie_record(a, R7, super::tracked::ALIVE);
            }
            a.jump(out);
        }
        // The flag now says what this poll found so far; the rebuild's end adds the rest.
        a.bind(moved);
        a.store(Size::DW, R9, flag, R4);
        a.bind(rebuild);
        Some(())
    }

    /// The end of a rebuild (the record built, `r9` the storage value): the rebuild flag is
    /// kept when it was set and set when the socket is locked now, when the witness moved
    /// while the record was read, or when `clock_running` (emitted here, jumping to its
    /// label when a clock of the record runs) says so. Clobbers `r0`-`r5`, `r8`.
    pub(super) fn emit_end(
        &self,
        a: &mut Asm,
        record_len: usize,
        attrs: Attrs,
        clock_running: impl FnOnce(&mut Asm, Label) -> Option<()>,
    ) -> Option<()> {
        let area = |off: usize| i16::try_from(record_len + off).ok();
        let flag = area(self.flag)?;
        let set = a.label();
        let done = a.label();
        a.mov(R1, R7);
        a.call(super::program::HELPER_SKC_TO_TCP_SOCK);
        a.mov(R8, R0);
        a.load(Size::DW, R4, R9, flag);
        clock_running(a, set)?;
        a.jump_if(Cond::Eq, R8, 0, done);
        self.emit_locked(a);
        for l in self.loads_for(attrs) {
            a.load(l.size, R2, R8, i16::try_from(l.kernel).ok()?);
            a.load(l.size, R3, R9, area(usize::from(l.at))?);
            a.jump_if_reg(Cond::Ne, R2, R3, set);
        }
        a.jump(done);
        a.bind(set);
        a.mov_imm(R4, 1);
        a.bind(done);
        a.store(Size::DW, R9, flag, R4);
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::fields::K_COUNT;

    #[test]
    fn every_record_value_is_classified_once() {
        for i in 0..K_COUNT {
            let n = COVERAGE.iter().filter(|(k, _)| *k as usize == i).count();
            assert_eq!(n, 1, "value {i} of K is classified {n} times");
        }
    }

    #[test]
    fn the_running_kernels_witness_holds_the_ticks_and_the_lines() {
        let blob =
            std::fs::read("/sys/kernel/btf/vmlinux").expect("kernel BTF (CI kernels have it)");
        let btf = Btf::parse(&blob).unwrap();
        let layout = super::super::record::Layout::new(&btf).unwrap();
        let w = &layout.witness;
        let has = |k: K| w.loads.iter().any(|l| l.k == Some(k));
        for k in [K::SegsIn, K::SegsOut, K::WriteSeq, K::CopiedSeq, K::State, K::Pending] {
            assert!(has(k), "{k:?} is a tick");
        }
        assert!(!has(K::BytesRetrans), "a Ticks value is left out");
        let lines: std::collections::BTreeSet<u32> =
            w.loads.iter().map(|l| l.kernel / 64).collect();
        assert!(lines.len() <= 18, "the witness reads {} cache lines: {lines:?}", lines.len());
        assert!(w.len <= 384, "a {}-byte witness", w.len);
    }
}
