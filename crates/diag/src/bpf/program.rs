//! The socket iterator's program, assembled for one kernel's [`Layout`] and one
//! [`Selection`]. Per socket the iterator visits (`struct bpf_iter__tcp`):
//! 1. `ctx->sk_common` is NULL at the end of the walk: return.
//! 2. the family or the port/address filter rejects it ([`super::select`]): return.
//! 3. the state is not one of the requested ones: return (nothing is written).
//! 4. copy the `sock_common` header (family, state, ports, addresses, interface), the uid,
//!    the socket cookie (`bpf_get_socket_cookie`) and `jiffies` (the ages and running timers
//!    are computed from it);
//! 5. `bpf_skc_to_tcp_sock`: for a full TCP socket copy every listed field of `tcp_sock`, the
//!    words of the congestion control's private area BBR's info is read from, the congestion
//!    control's name, the inode (`sk_socket->file->f_inode->i_ino`) and the monotonic clock
//!    when an RTO episode is timed; TIME_WAIT and request sockets carry the header only;
//! 6. `bpf_seq_write` the record, once.
//!
//! With [`Selection::brief`] the port/address filter runs after the state check, and a
//! socket it rejects gets a brief record ([`super::record::brief`]: state, congestion-control
//! name, the few values a scrape's aggregates need) instead of none: steps 4-5 read nine
//! `tcp_sock` fields instead of ~100, and the record is ~80 bytes instead of ~500.
//!
//! Every field is copied raw (a bitfield as the bytes that hold it); the arithmetic
//! `tcp_get_info` does (shifts, jiffies to microseconds, the delivery rate) is done in user
//! space ([`super::convert`]). Little-endian only (bitfield positions are LSB-first there).

use super::asm::{Asm, Cond, Label, R0, R1, R2, R3, R6, R7, R8, R9, R10, Size};
pub use super::dirty::{Marks, Walk};
use super::fields::{
    self,
    Base::{Bbr, Common, Tcp},
    K,
};
use super::record::{Layout, Load, brief, header};
use super::select::{self, Selection};

/// Helper ids (`enum bpf_func_id`).
const HELPER_GET_SOCKET_COOKIE: i32 = 46;
const HELPER_KTIME_GET_NS: i32 = 5;
const HELPER_JIFFIES64: i32 = 118;
const HELPER_SEQ_WRITE: i32 = 127;
pub(super) const HELPER_SKC_TO_TCP_SOCK: i32 = 137;
const HELPER_SKC_TO_TCP_TIMEWAIT_SOCK: i32 = 138;
const TCP_TIME_WAIT: i32 = 6;

const AF_INET6: i32 = 10;

impl Layout {
    /// (cookie, state) per socket: the floor of any iterator-based dump.
    pub fn minimal_program(&self, states: u32) -> Option<Vec<u64>> {
        let mut a = Asm::default();
        let out = a.label();
        a.mov(R6, R1);
        a.load(Size::DW, R7, R6, 8);
        a.jump_if(Cond::Eq, R7, 0, out);
        a.load(Size::B, R2, R7, self.state_off as i16);
        a.mov_imm(R3, 1);
        a.lsh(R3, R2);
        a.and_imm(R3, states as i32);
        a.jump_if(Cond::Eq, R3, 0, out);
        a.mov(R1, R7);
        a.call(HELPER_GET_SOCKET_COOKIE);
        a.store(Size::DW, R10, -16, R0);
        a.load(Size::B, R2, R7, self.state_off as i16);
        a.store(Size::DW, R10, -8, R2);
        emit_seq_write(&mut a, -16, 16);
        a.bind(out);
        a.mov_imm(R0, 0);
        a.exit();
        a.finish()
    }

    /// The `iter/tcp` program for the sockets `sel` selects.
    pub fn program(&self, sel: &Selection) -> Option<Vec<u64>> {
        self.program_for(sel, Target::Tcp)
    }

    /// The program for the sockets `sel` selects, run by `target`'s iterator.
    ///
    /// The record is written once per socket, every byte of it: no blanket zeroing, only the
    /// bytes no field covers on the path taken (alignment gaps; the `tcp_sock` area of a
    /// TIME_WAIT or request socket; the IPv6 addresses of an IPv4 socket; the name of a socket
    /// without congestion control). Addresses and the name are copied 8 bytes at a time, and
    /// the monotonic clock is read only when `rto_stamp` needs it.
    pub fn program_for(&self, sel: &Selection, target: Target) -> Option<Vec<u64>> {
        let rec = -(self.record_len as i32);
        let at = |off: usize| (rec + off as i32) as i16;
        let mut a = Asm::default();
        if select::selects_nothing(sel) {
            a.mov_imm(R0, 0);
            a.exit();
            return a.finish();
        }
        let out = a.label();
        a.mov(R6, R1);
        match target {
            Target::Tcp => a.load(Size::DW, R7, R6, 8), // ctx->sk_common
            Target::Tracked(t) => {
                if sel.brief || sel.filter.is_some() || (t.all && t.marks.walk != Walk::Sweep) {
                    return None;
                }
                a.load(Size::DW, R7, R6, 16); // ctx->sk
                a.jump_if(Cond::Eq, R7, 0, out);
                match t.marks.walk {
                    Walk::Sweep => {
                        // A marked socket whose dirty element could not be created (its
                        // option memory at `optmem_max`, an atomic allocation failed) would
                        // stay marked with no element: hooks skip it, dirty polls never
                        // reach it. The sweep gives it its element again.
                        let unmarked = a.label();
                        t.marks.emit_value(&mut a, R9, out);
                        a.load(Size::DW, R2, R9, t.marks.dirty_at);
                        a.jump_if(Cond::Eq, R2, 0, unmarked);
                        super::dirty::emit_storage_get(
                            &mut a,
                            t.marks.dirty_fd,
                            R7,
                            super::dirty::F_CREATE,
                        );
                        a.bind(unmarked);
                    }
                    Walk::Dirty => {
                        // The mark is cleared before anything is read: a change that ends
                        // after this marks the socket again (an exchange: the reads below
                        // cannot pass it).
                        t.marks.emit_value(&mut a, R9, out);
                        a.mov_imm(R2, 0);
                        a.atomic_xchg(R9, t.marks.dirty_at, R2);
                    }
                    Walk::Trim => {
                        t.marks.emit_trim_start(&mut a, out);
                        // The delete moved the option memory: not a change of the socket's,
                        // so not a witness move (the rebuild below still records it).
                        let omem = self.witness.loads.iter().find(|w| w.k == Some(K::OmemAlloc));
                        if let Some(w) = omem {
                            let stored = i16::try_from(self.record_len + usize::from(w.at)).ok()?;
                            a.load(w.size, R2, R7, i16::try_from(w.kernel).ok()?);
                            a.store(w.size, R9, stored, R2);
                        }
                    }
                }
                // Most sockets end here: their witness did not move.
                self.witness.emit_start(&mut a, self.record_len, sel.attrs, &t, out)?;
            }
        }
        a.jump_if(Cond::Eq, R7, 0, out);
        // Family and port/address filter before any other work (they read sock_common only);
        // the record's first bytes are their scratch space. With brief records the filter
        // comes after the state check: what it rejects still gets a record.
        let brief = a.label();
        let brief_filter = match &sel.filter {
            Some(f) if sel.brief && select::depends_on_the_socket(f) => {
                Some(Selection { ipv4: true, ipv6: true, filter: Some(f.clone()), ..sel.clone() })
            }
            _ if sel.brief => return None,
            _ => None,
        };
        match brief_filter {
            Some(_) => {
                let families = Selection { filter: None, ..sel.clone() };
                select::emit_selection(&mut a, &self.filter_offsets, &families, 0, out);
            }
            None => {
                select::emit_selection(&mut a, &self.filter_offsets, sel, at(header::COOKIE), out)
            }
        }
        // State filter; a TIME_WAIT socket is filtered (and reported) by its substate, as
        // sock_diag does. r8/r9 keep the substate and expiry across the calls.
        a.mov_imm(R8, 0);
        a.mov_imm(R9, 0);
        let check = a.label();
        a.load(Size::B, R2, R7, self.state_off as i16);
        a.jump_if(Cond::Ne, R2, TCP_TIME_WAIT, check);
        a.mov(R1, R7);
        a.call(HELPER_SKC_TO_TCP_TIMEWAIT_SOCK);
        a.jump_if(Cond::Eq, R0, 0, out);
        a.load(Size::B, R8, R0, self.tw_substate as i16);
        a.load(Size::DW, R9, R0, self.tw_expires as i16);
        a.mov(R2, R8);
        a.bind(check);
        a.mov_imm(R3, 1);
        a.lsh(R3, R2);
        a.and_imm(R3, sel.states as i32);
        // A dirty socket that left the tracked states is reported gone.
        let gone = a.label();
        let dirty_walk = match target {
            Target::Tracked(t) if t.marks.walk == Walk::Dirty => Some(t.marks),
            _ => None,
        };
        a.jump_if(Cond::Eq, R3, 0, if dirty_walk.is_some() { gone } else { out });
        if let Some(f) = &brief_filter {
            select::emit_selection(&mut a, &self.filter_offsets, f, at(header::COOKIE), brief);
        }
        // Header bytes 28..32: FULL, HAS_CA, TW_SUBSTATE and KIND (0: full).
        a.store_imm(Size::W, R10, at(header::FULL), 0);
        a.store(Size::B, R10, at(header::TW_SUBSTATE), R8);
        a.store(Size::DW, R10, at(header::TW_EXPIRES), R9);
        a.mov(R1, R7);
        a.call(HELPER_GET_SOCKET_COOKIE);
        a.store(Size::DW, R10, at(header::COOKIE), R0);
        a.call(HELPER_JIFFIES64);
        a.store(Size::DW, R10, at(header::JIFFIES), R0);
        match target {
            Target::Tcp => a.load(Size::W, R2, R6, 16), // ctx->uid
            Target::Tracked(t) => a.load(Size::W, R2, R7, t.sk_uid as i16), // sk->sk_uid
        }
        a.store(Size::W, R10, at(header::UID), R2);
        // Only the fields the request's attributes need are read: the others' slots, like
        // the value bytes no field covers, hold zeros whatever the path.
        let loads: Vec<Load> =
            self.loads.iter().filter(|l| fields::needed(l.k, sel.attrs)).copied().collect();
        let covered_by = |pick: &dyn Fn(&Load) -> bool| {
            let mut covered = vec![false; self.record_len];
            for l in loads.iter().filter(|l| pick(l)) {
                let from = usize::from(l.record);
                covered[from..from + l.bytes as usize].fill(true);
            }
            covered
        };
        let all_fields = covered_by(&|_| true);
        let gaps: Vec<bool> = all_fields.iter().map(|c| !c).collect();
        zero_uncovered(&mut a, rec, &all_fields, header::END, &vec![false; self.record_len]);
        for l in loads.iter().filter(|l| l.base == Common) {
            a.load(l.size, R2, R7, l.kernel as i16);
            a.store(l.size, R10, at(usize::from(l.record)), R2);
        }
        let v4 = a.label();
        let addresses_done = a.label();
        a.load(Size::H, R2, R7, self.family_off as i16);
        a.jump_if(Cond::Ne, R2, AF_INET6, v4);
        for i in (0..16).step_by(8) {
            a.load(Size::DW, R2, R7, (self.v6_src + i) as i16);
            a.store(Size::DW, R10, at(header::SADDR6 + i as usize), R2);
            a.load(Size::DW, R2, R7, (self.v6_dst + i) as i16);
            a.store(Size::DW, R10, at(header::DADDR6 + i as usize), R2);
        }
        a.jump(addresses_done);
        a.bind(v4);
        for off in (header::SADDR6..header::CA_NAME).step_by(8) {
            a.store_imm(Size::DW, R10, at(off), 0);
        }
        a.bind(addresses_done);
        let write = a.label();
        let not_full = a.label();
        let no_ca = a.label();
        a.mov(R1, R7);
        a.call(HELPER_SKC_TO_TCP_SOCK);
        a.jump_if(Cond::Eq, R0, 0, not_full);
        a.mov(R8, R0);
        a.mov_imm(R2, 1);
        a.store(Size::B, R10, at(header::FULL), R2);
        // The inode, as sock_i_ino: each load of the walk is a BTF pointer load, so a NULL
        // `sk_socket` (an orphaned socket) or `file` reads as 0 down the chain.
        a.mov(R2, R8);
        for off in self.inode_path {
            a.load(Size::DW, R2, R2, off as i16);
        }
        a.store(Size::DW, R10, at(header::INODE), R2);
        // In the kernel struct's order: neighbouring fields share cache lines, and the
        // lines are touched in address order (the hardware prefetcher follows).
        let mut tcp: Vec<&Load> = loads.iter().filter(|l| l.base == Tcp).collect();
        tcp.sort_by_key(|l| l.kernel);
        for l in tcp {
            a.load(l.size, R2, R8, l.kernel as i16);
            if l.flag {
                let zero = a.label();
                a.mov_imm(R3, 0);
                a.jump_if(Cond::Eq, R2, 0, zero);
                a.mov_imm(R3, 1);
                a.bind(zero);
                a.store(l.size, R10, at(usize::from(l.record)), R3);
            } else {
                a.store(l.size, R10, at(usize::from(l.record)), R2);
            }
        }
        // BBR's fields, read as the u64 words of icsk_ca_priv that hold them.
        for l in loads.iter().filter(|l| l.base == Bbr) {
            let word = l.kernel / 8 * 8;
            let within = l.kernel - word;
            if within + l.bytes > 8 {
                return None;
            }
            a.load(Size::DW, R2, R8, (self.ca_priv + word) as i16);
            if within > 0 {
                a.rsh_imm(R2, (within * 8) as i32);
            }
            a.store(l.size, R10, at(usize::from(l.record)), R2);
        }
        // The monotonic clock only serves an RTO episode in progress (`rto_stamp` set).
        a.store_imm(Size::DW, R10, at(header::KTIME_NS), 0);
        if let Some(stamp) =
            self.slot(K::RtoStamp).filter(|_| fields::needed(K::RtoStamp, sel.attrs))
        {
            let no_rto = a.label();
            a.load(Size::of(stamp.size.into())?, R2, R10, at(usize::from(stamp.offset)));
            a.jump_if(Cond::Eq, R2, 0, no_rto);
            a.call(HELPER_KTIME_GET_NS);
            a.store(Size::DW, R10, at(header::KTIME_NS), R0);
            a.bind(no_rto);
        }
        // The congestion control's name, when the request reports it or BBR's model.
        if sel.attrs.cong || sel.attrs.cc_info {
            a.load(Size::DW, R9, R8, self.ca_ops as i16);
            a.jump_if(Cond::Eq, R9, 0, no_ca);
            a.mov_imm(R2, 1);
            a.store(Size::B, R10, at(header::HAS_CA), R2);
            for i in (0..16).step_by(8) {
                a.load(Size::DW, R2, R9, (self.ca_name + i) as i16);
                a.store(Size::DW, R10, at(header::CA_NAME + i as usize), R2);
            }
            a.jump(write);
        } else {
            a.jump(no_ca);
        }
        // TIME_WAIT and request sockets: the tcp_sock area holds zeros (user space does not
        // read it, but no stack bytes leave the kernel).
        a.bind(not_full);
        a.store_imm(Size::DW, R10, at(header::KTIME_NS), 0);
        a.store_imm(Size::DW, R10, at(header::INODE), 0);
        let common = covered_by(&|l| l.base == Common);
        zero_uncovered(&mut a, rec, &common, header::END, &gaps);
        emit_no_ca(&mut a, rec, no_ca, header::CA_NAME, write);
        match target {
            Target::Tcp => emit_seq_write(&mut a, rec, self.record_len),
            Target::Tracked(t) => self.emit_tracked_write(&mut a, rec, sel, &t, out)?,
        }
        if brief_filter.is_some() {
            a.jump(out);
            a.bind(brief);
            self.emit_brief(&mut a);
        }
        if let Some(marks) = dirty_walk {
            // Its GONE record; one lost to a full buffer is written when the walk resumes
            // here, or at the next poll (the mark set again).
            a.jump(out);
            a.bind(gone);
            emit_cookie_record(&mut a, R7, super::tracked::GONE);
            a.jump_if(Cond::Eq, R0, 0, out);
            marks.emit_value(&mut a, R9, out);
            a.store_imm(Size::DW, R9, marks.dirty_at, 1);
        }
        a.bind(out);
        a.mov_imm(R0, 0);
        a.exit();
        a.finish()
    }

    /// The brief record of the socket in `r7` (`r8`: its TIME_WAIT substate), written; falls
    /// through after the write.
    fn emit_brief(&self, a: &mut Asm) {
        let rec = -(self.brief_len as i32);
        let at = |off: usize| (rec + off as i32) as i16;
        let not_full = a.label();
        let no_ca = a.label();
        let write = a.label();
        // Bytes 16..32: the unused ones zero, then the states and the kind.
        a.store_imm(Size::DW, R10, at(16), 0);
        a.store_imm(Size::DW, R10, at(brief::STATE), 0);
        a.load(Size::B, R2, R7, self.state_off as i16);
        a.store(Size::B, R10, at(brief::STATE), R2);
        a.store(Size::B, R10, at(brief::TW_SUBSTATE), R8);
        a.store_imm(Size::B, R10, at(brief::KIND), 1);
        a.mov(R1, R7);
        a.call(HELPER_SKC_TO_TCP_SOCK);
        a.jump_if(Cond::Eq, R0, 0, not_full);
        a.mov(R8, R0);
        a.store_imm(Size::B, R10, at(brief::FULL), 1);
        let mut covered = vec![false; self.brief_len];
        let mut loads: Vec<&Load> = self.brief_loads.iter().collect();
        loads.sort_by_key(|l| l.kernel);
        for l in loads {
            a.load(l.size, R2, R8, l.kernel as i16);
            a.store(l.size, R10, at(usize::from(l.record)), R2);
            let from = usize::from(l.record);
            covered[from..from + l.bytes as usize].fill(true);
        }
        zero_uncovered(a, rec, &covered, brief::END, &vec![false; self.brief_len]);
        a.load(Size::DW, R9, R8, self.ca_ops as i16);
        a.jump_if(Cond::Eq, R9, 0, no_ca);
        a.store_imm(Size::B, R10, at(brief::HAS_CA), 1);
        for i in (0..16).step_by(8) {
            a.load(Size::DW, R2, R9, (self.ca_name + i) as i16);
            a.store(Size::DW, R10, at(brief::CA_NAME + i as usize), R2);
        }
        a.jump(write);
        // TIME_WAIT and request sockets: no values, no name.
        a.bind(not_full);
        let none = vec![false; self.brief_len];
        zero_uncovered(a, rec, &none, brief::END, &none);
        emit_no_ca(a, rec, no_ca, brief::CA_NAME, write);
        emit_seq_write(a, rec, self.brief_len);
    }

    /// The tracked poll's end ([`Target::Tracked`]): the witness's rebuild flag is updated
    /// ([`super::witness::Witness::emit_end`]); a socket whose flag ends set is marked dirty
    /// ([`super::dirty`]) so the next dirty poll reads it again, and as a new dirty element
    /// is charged to the socket's option memory, that value is read again into the record
    /// and the witness. Then the record on the stack at `rec` is compared word by word with
    /// the socket's stored copy, leaving out the two clock words. Unless `t.all`, a socket
    /// whose words all match and whose values do not grow with the clock (no chrono running:
    /// busy, rwnd- and sndbuf-limited times; no RTO episode timed) gets a 32-byte
    /// [`super::tracked::ALIVE`] record in a sweep and none in a dirty poll's walks;
    /// otherwise the record is written whole and then stored. The stored copy only grows
    /// stale by the clock words, so a field that changed is always written. A record the
    /// full buffer refused is not stored, and the socket is marked: the walk resumes at this
    /// socket with the next read, or the next dirty poll reads it.
    fn emit_tracked_write(
        &self,
        a: &mut Asm,
        rec: i32,
        sel: &Selection,
        t: &Tracked,
        out: Label,
    ) -> Option<()> {
        let at = |off: usize| (rec + off as i32) as i16;
        let flag = i16::try_from(self.record_len + self.witness.flag).ok()?;
        let changed = a.label();
        let refused = a.label();
        let compare = a.label();
        t.marks.emit_value(a, R9, out);
        let read_again = |a: &mut Asm, to: Label| {
            self.emit_clock_running(a, rec, to)?;
            self.emit_tx_in_flight(a, rec, sel, to)
        };
        self.witness.emit_end(a, self.record_len, sel.attrs, read_again)?;
        // r8 is still the tcp_sock (or NULL) emit_end read.
        a.load(Size::DW, R2, R9, flag);
        a.jump_if(Cond::Eq, R2, 0, compare);
        t.marks.emit_mark(a, R9, R7, compare, false);
        self.emit_reread_omem(a, rec, sel, compare)?;
        a.bind(compare);
        let clocks = [header::JIFFIES, header::KTIME_NS];
        if !t.all {
            for w in (0..self.record_len).step_by(8).filter(|w| !clocks.contains(w)) {
                a.load(Size::DW, R2, R10, at(w));
                a.load(Size::DW, R3, R9, w as i16);
                a.jump_if_reg(Cond::Ne, R2, R3, changed);
            }
            self.emit_clock_running(a, rec, changed)?;
            if t.marks.walk == Walk::Sweep {
                a.store_imm(Size::B, R10, at(header::KIND), i32::from(super::tracked::ALIVE));
                emit_seq_write(a, rec, super::tracked::ALIVE_LEN);
            }
            a.jump(out);
        }
        a.bind(changed);
        emit_seq_write(a, rec, self.record_len);
        a.jump_if(Cond::Ne, R0, 0, refused);
        for w in (0..self.record_len).step_by(8) {
            a.load(Size::DW, R2, R10, at(w));
            a.store(Size::DW, R9, w as i16, R2);
        }
        a.jump(out);
        a.bind(refused);
        a.store_imm(Size::DW, R9, flag, 1);
        t.marks.emit_mark(a, R9, R7, out, false);
        Some(())
    }

    /// Reads the socket's option memory (`sk_omem_alloc`, the tcp_sock in `r8`) again into
    /// the record on the stack at `rec` and into the stored witness (`r9`): a dirty element
    /// created after the record was read is charged there. Clobbers `r2`.
    fn emit_reread_omem(&self, a: &mut Asm, rec: i32, sel: &Selection, done: Label) -> Option<()> {
        let Some(load) = self.loads.iter().find(|l| l.k == K::OmemAlloc) else {
            return Some(());
        };
        if !fields::needed(K::OmemAlloc, sel.attrs) {
            return Some(());
        }
        a.jump_if(Cond::Eq, R8, 0, done);
        a.load(load.size, R2, R8, i16::try_from(load.kernel).ok()?);
        a.store(load.size, R10, (rec + i32::from(load.record)) as i16, R2);
        if let Some(w) = self.witness.loads.iter().find(|w| w.k == Some(K::OmemAlloc)) {
            let stored = i16::try_from(self.record_len + usize::from(w.at)).ok()?;
            a.store(w.size, R9, stored, R2);
        }
        Some(())
    }

    /// Jumps to `to` when the record on the stack at `rec` says transmitted skbs are still
    /// charged to the socket (`sk_wmem_alloc` above its own reference): their TX completion
    /// frees them without a lock or a hook, so the socket is read again until none are left.
    /// Clobbers `r2`.
    fn emit_tx_in_flight(&self, a: &mut Asm, rec: i32, sel: &Selection, to: Label) -> Option<()> {
        let Some(slot) =
            self.slot(K::WmemAlloc).filter(|_| fields::needed(K::WmemAlloc, sel.attrs))
        else {
            return Some(());
        };
        a.load(Size::of(slot.size.into())?, R2, R10, (rec + i32::from(slot.offset)) as i16);
        a.jump_if(Cond::Ne, R2, 1, to);
        Some(())
    }

    /// Jumps to `to` when the record on the stack at `rec` has a clock running (a chrono,
    /// an RTO episode timed): its values grow with time alone. Clobbers `r2`.
    fn emit_clock_running(&self, a: &mut Asm, rec: i32, to: Label) -> Option<()> {
        let at = |off: usize| (rec + off as i32) as i16;
        for slot in [K::ChronoType, K::RtoStamp].into_iter().filter_map(|k| self.slot(k)) {
            a.load(Size::of(slot.size.into())?, R2, R10, at(usize::from(slot.offset)));
            if slot.shift > 0 {
                a.rsh_imm(R2, i32::from(slot.shift));
            }
            if slot.bits > 0 && slot.bits < 31 {
                a.and_imm(R2, (1 << slot.bits) - 1);
            }
            a.jump_if(Cond::Ne, R2, 0, to);
        }
        Some(())
    }
}

/// Which BPF iterator runs a record program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `iter/tcp` (`struct bpf_iter__tcp`): every socket of a namespace, each written.
    Tcp,
    /// `iter/bpf_sk_storage_map` (`struct bpf_iter__bpf_sk_storage_map`) over the tracked
    /// sockets' storage, which holds each socket's last written record: only what changed is
    /// written in full ([`super::tracked`]).
    Tracked(Tracked),
}

/// The tracked poll's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tracked {
    /// `sock.sk_uid`'s offset (the storage iterator's context has no uid).
    pub sk_uid: u32,
    /// Write every socket in full (a resynchronising or full-snapshot sweep).
    pub all: bool,
    /// The dirty marks, and whether this program walks the dirty map.
    pub marks: Marks,
}

/// At `no_ca` the congestion control's name (16 bytes at `ca_name` of the record at `rec`)
/// is zeroed; `write` is bound after it.
fn emit_no_ca(a: &mut Asm, rec: i32, no_ca: Label, ca_name: usize, write: Label) {
    let at = |off: usize| (rec + off as i32) as i16;
    a.bind(no_ca);
    a.store_imm(Size::DW, R10, at(ca_name), 0);
    a.store_imm(Size::DW, R10, at(ca_name + 8), 0);
    a.bind(write);
}

/// Writes the 32-byte record of kind `kind` ([`super::tracked::ALIVE`],
/// [`super::tracked::GONE`]) of the socket in register `sk`: its cookie, zeros, the kind.
/// `r0` is then `bpf_seq_write`'s result (0: written). Clobbers `r0`-`r5`.
pub(super) fn emit_cookie_record(a: &mut Asm, sk: super::asm::Reg, kind: u8) {
    let len = super::tracked::ALIVE_LEN as i32;
    a.mov(R1, sk);
    a.call(HELPER_GET_SOCKET_COOKIE);
    a.store(Size::DW, R10, (-len + header::COOKIE as i32) as i16, R0);
    for off in (8..super::tracked::ALIVE_LEN).step_by(8) {
        a.store_imm(Size::DW, R10, (-len + off as i32) as i16, 0);
    }
    a.store_imm(Size::B, R10, (-len + header::KIND as i32) as i16, i32::from(kind));
    emit_seq_write(a, -len, super::tracked::ALIVE_LEN);
}

/// Writes the `len` bytes at `stack_off` (from `r10`) to the iterator's seq_file
/// (`bpf_seq_write(ctx->meta->seq, ...)`); `r6` holds the iterator's context. Clobbers
/// `r0`-`r5`.
pub fn emit_seq_write(a: &mut Asm, stack_off: i32, len: usize) {
    a.load(Size::DW, R1, R6, 0); // ctx->meta
    a.load(Size::DW, R1, R1, 0); // meta->seq
    a.mov(R2, R10);
    a.add_imm(R2, stack_off);
    a.mov_imm(R3, len as i32);
    a.call(HELPER_SEQ_WRITE);
}

/// Zeroes the record bytes from `from` on that `covered` leaves out and `done` has not
/// zeroed already: a whole 8-byte word with one store, stray bytes one by one.
fn zero_uncovered(a: &mut Asm, rec: i32, covered: &[bool], from: usize, done: &[bool]) {
    let at = |off: usize| (rec + off as i32) as i16;
    for word in (from..covered.len()).step_by(8) {
        let want: Vec<usize> = (word..word + 8).filter(|&i| !covered[i] && !done[i]).collect();
        if want.len() == 8 {
            a.store_imm(Size::DW, R10, at(word), 0);
        } else {
            for i in want {
                a.store_imm(Size::B, R10, at(i), 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::btf::Btf;
    use super::*;

    #[test]
    fn the_running_kernel_has_every_required_field() {
        let blob =
            std::fs::read("/sys/kernel/btf/vmlinux").expect("kernel BTF (CI kernels have it)");
        let btf = Btf::parse(&blob).unwrap();
        let layout = Layout::new(&btf).unwrap();
        assert!(layout.record_len <= 512 - 8, "record of {} bytes", layout.record_len);
        let all = Selection {
            states: 1 << 1,
            ipv4: true,
            ipv6: true,
            filter: None,
            attrs: crate::wire::Attrs::ALL,
            brief: false,
        };
        assert!(layout.program(&all).is_some());
    }
}
