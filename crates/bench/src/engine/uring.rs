//! The io_uring engine (`--engine io_uring`), seed 001's "io_uring ... may upend the
//! traditional BSD socket API", for both ends of `tcptail bench`.
//!
//! # How it differs from the default engine
//!
//! Each socket has one **multishot receive** armed for the whole run: the kernel takes a buffer
//! from the ring's **provided-buffer ring** for each arrival and posts a completion naming it;
//! the engine parses the bytes and hands the buffer back. Sends are queued on the ring. The
//! client's round trip costs one `io_uring_enter`, which submits the send and waits for the
//! next completion at once, where the default engine makes a `send` and a `recv` call: it
//! lends its closed-loop sends (no completion unless they fail, the answer proves them done).
//! The server submits its send without waiting (the send runs inside that call and its
//! completion is there when it returns), so that a request's service time ends there as the
//! default engine's ends after its `send`, then waits for the next request: two calls. With
//! `--sqpoll` a kernel thread picks the sends up and the wait is the only call; with `--spin`
//! the completion queue is polled in user space and nothing enters the kernel at all (both
//! together: no system call per request).
//!
//! The client drives all its connections from **one thread and one ring** (or, with
//! `--threads T`, T threads with a ring each, connection `i` on thread `i % T`): at 16
//! connections that is one thread woken by whichever answers came first instead of 16 threads
//! each woken for its own. It has the default engine's load shapes (`--depth`, `--rate`,
//! `--mode crr`, `--attribute`), measured and recorded by the same code (see [`client`]).
//! The server serves many connections from **one ring per server thread** (see [`server`]):
//! each connection's handshake stays on a thread of its own (blocking, with its deadline),
//! which then hands the connection to the ring thread of the CPU the Hello asked for and
//! sleeps until it ends, so requests wake one ring thread for all the connections whose
//! requests arrived, not a thread each.
//!
//! Deadlines are kept as in the default engine: a run's watchdog (`crate::watchdog`) shuts the
//! read side of a socket whose wait lasted too long, which completes its receive with
//! end-of-file; closed-loop waits carry no kernel timer. The open loop and connect-per-request
//! wait with one (the next intended send, the connect), and a server's wait for a send that
//! did not complete at once (the peer stopped reading) is bounded by the write timeout.
//!
//! Measured limit (`scripts/bench-engines`, README): on one connection, client and server on
//! one CPU, a round trip costs more kernel time than two blocking calls per end. The receive
//! is readiness-driven: the arrival wakes the socket's poll entry, which queues task work
//! for the ring's thread and wakes it; the thread then runs the receive into a provided
//! buffer and posts its completion. The default engine's blocked `recv` is woken with the
//! data already in reach. Profiles of the two show the difference in the wake-up path (with
//! interrupts off), the completion wait and the ring's submit/issue layers, not in the engine.
//! Taking the schedule out of it did not help: a one-connection ring that issued its receive
//! on demand (single-shot, in the enter after its send's, completing inline when the peer had
//! answered in between) and a server that sent and waited in one enter matched the default
//! engine's wake-ups and context switches per round trip and still measured slower (the
//! extra enter and the per-operation cost; README, "Where io_uring's round trip goes").

pub mod client;
pub mod server;

use crate::sys::uring::RingOptions;

/// Size of each provided receive buffer: a response of the default size fits one many times.
const RECV_BUFFER_LEN: usize = 16 * 1024;
/// How long an idle SQPOLL thread keeps polling before it sleeps (and the next submission
/// must wake it with a system call).
const SQPOLL_IDLE_MS: u32 = 1000;

/// Ring options for `sockets` sockets, each with one send slot of `send_len` bytes.
fn ring_options(sockets: usize, send_len: usize, sqpoll: bool) -> RingOptions {
    let recv_buffers = (sockets * 4).clamp(16, 1024).next_power_of_two() as u16;
    RingOptions {
        entries: (sockets * 4).clamp(16, 4096).next_power_of_two() as u32,
        recv_buffers,
        recv_buffer_len: RECV_BUFFER_LEN,
        send_slots: sockets,
        send_slot_len: send_len,
        sqpoll_idle_ms: sqpoll.then_some(SQPOLL_IDLE_MS),
    }
}

/// The server's completion tokens: the socket's index and what the operation was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Recv(usize),
    Send(usize),
}

impl Op {
    fn token(self) -> u64 {
        match self {
            Op::Recv(i) => (i as u64) << 1,
            Op::Send(i) => (i as u64) << 1 | 1,
        }
    }

    fn from_token(token: u64) -> Op {
        let i = (token >> 1) as usize;
        if token & 1 == 0 { Op::Recv(i) } else { Op::Send(i) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for op in [Op::Recv(0), Op::Send(0), Op::Recv(1023), Op::Send(7)] {
            assert_eq!(Op::from_token(op.token()), op);
        }
    }

    #[test]
    fn ring_sizes_are_powers_of_two() {
        let o = ring_options(16, 64, false);
        assert_eq!((o.entries, o.recv_buffers, o.send_slots), (64, 64, 16));
        assert_eq!(ring_options(1, 64, true).sqpoll_idle_ms, Some(SQPOLL_IDLE_MS));
    }
}
