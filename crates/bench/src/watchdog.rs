//! Deadlines for blocking receives, without a kernel timer per receive.
//!
//! `SO_RCVTIMEO` makes every blocking `recv` that sleeps arm and cancel a kernel timer: once per
//! request in a ping-pong. On the project VM that cost loopback ping-pong 3.8 % of its
//! transactions/s (75.4k against 78.3k/s, same CPU, median of five interleaved runs) and 0.5 µs
//! of its p50, more than everything else tcptail adds to a minimal blocking ping-pong.
//!
//! So the measuring loops block without a timeout and publish their progress instead: one
//! relaxed atomic store when a wait begins and one when it ends ([`Watch::waiting`],
//! [`Watch::answered`]), written by the loop's thread only. One [`Watchdog`] thread looks at
//! every watch once per tick; a watch that has been waiting with no progress for longer than
//! its limit, or at all once a stop was noticed [`Watchdog::run`]'s grace ago, is **fired**:
//! the watchdog shuts the read side of the socket down, which wakes the blocked `recv` with
//! end-of-file, and the loop, seeing [`Watch::fired`], treats it as its timeout.
//!
//! Invariants:
//! - A watch holds its own duplicate of the socket's descriptor, so the socket the watchdog
//!   shuts down is always the watched one: a descriptor number closed and reused elsewhere is
//!   never touched. The duplicate is closed when the [`Watch`] is dropped.
//! - A deadline is noticed at most one tick late ([`Watchdog::new`]); a wait that ends before
//!   its limit is never fired, because any new progress value restarts the watchdog's clock.
//! - [`Watchdog::run`] returns once [`Watchdog::close`] is called (or a [`Closer`] dropped).

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Looks at every registered [`Watch`] once per tick; [`Watchdog::run`] is its thread.
#[derive(Debug)]
pub(crate) struct Watchdog {
    tick: Duration,
    watched: Mutex<Vec<Arc<Watched>>>,
    next_id: AtomicU64,
    closed: Mutex<bool>,
    wake: Condvar,
}

/// What the watchdog knows of one watched socket.
#[derive(Debug)]
struct Watched {
    id: u64,
    /// A duplicate of the receiver's socket (see the module's invariants).
    socket: TcpStream,
    limit: Duration,
    /// `count << 1 | waiting`, written only by the receiver's thread.
    progress: AtomicU64,
    fired: AtomicBool,
}

/// The receiving loop's side of a watch. Dropping it ends the watch.
#[derive(Debug)]
pub(crate) struct Watch {
    dog: Arc<Watchdog>,
    watched: Arc<Watched>,
    count: u64,
}

/// Closes the watchdog when dropped, so that a scope whose other threads panic still ends.
pub(crate) struct Closer<'a>(pub(crate) &'a Watchdog);

impl Drop for Closer<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Watchdog {
    /// A watchdog that looks every `tick`: deadlines are noticed at most that late.
    pub(crate) fn new(tick: Duration) -> Arc<Watchdog> {
        Arc::new(Watchdog {
            tick,
            watched: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            closed: Mutex::new(false),
            wake: Condvar::new(),
        })
    }

    /// The tick for deadlines of `limit`: a tenth of it, between 10 ms and `longest`.
    pub(crate) fn tick_for(limit: Duration, longest: Duration) -> Duration {
        (limit / 10).clamp(Duration::from_millis(10), longest.max(Duration::from_millis(10)))
    }

    /// Watches `socket` (a duplicate of it is kept): once a wait on it has lasted `limit`
    /// without progress, the socket's read side is shut down.
    pub(crate) fn watch(
        self: &Arc<Self>,
        socket: &TcpStream,
        limit: Duration,
    ) -> io::Result<Watch> {
        let watched = Arc::new(Watched {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            socket: socket.try_clone()?,
            limit,
            progress: AtomicU64::new(0),
            fired: AtomicBool::new(false),
        });
        lock(&self.watched).push(Arc::clone(&watched));
        Ok(Watch { dog: Arc::clone(self), watched, count: 0 })
    }

    /// Ends [`Watchdog::run`]. Idempotent.
    pub(crate) fn close(&self) {
        *lock(&self.closed) = true;
        self.wake.notify_all();
    }

    /// The watchdog's thread: looks every tick until [`Watchdog::close`]. Once `stopping()`
    /// turns true, every watch still waiting `grace` after that moment is fired too.
    pub(crate) fn run(&self, stopping: &dyn Fn() -> bool, grace: Duration) {
        // Per watch id: the progress value last seen and since when it has not changed.
        let mut seen: HashMap<u64, (u64, Instant)> = HashMap::new();
        let mut stop_noticed: Option<Instant> = None;
        loop {
            {
                let closed = lock(&self.closed);
                let (closed, _) = self
                    .wake
                    .wait_timeout_while(closed, self.tick, |closed| !*closed)
                    .unwrap_or_else(PoisonError::into_inner);
                if *closed {
                    return;
                }
            }
            // Clocks are read after the flags and values they date, never before.
            if stop_noticed.is_none() && stopping() {
                stop_noticed = Some(Instant::now());
            }
            let grace_over = stop_noticed.is_some_and(|t| t.elapsed() >= grace);
            let watched = lock(&self.watched).clone();
            seen.retain(|id, _| watched.iter().any(|w| w.id == *id));
            for w in &watched {
                let progress = w.progress.load(Ordering::Relaxed);
                let now = Instant::now();
                let (last, since) = seen.entry(w.id).or_insert((progress, now));
                if *last != progress {
                    (*last, *since) = (progress, now);
                    continue;
                }
                let waiting = progress & 1 == 1;
                let expired = now.duration_since(*since) >= w.limit || grace_over;
                if waiting && expired && !w.fired.swap(true, Ordering::Relaxed) {
                    // Wakes the blocked recv with end-of-file; fails only if the peer is
                    // already gone, and then the recv has returned anyway.
                    let _ = w.socket.shutdown(Shutdown::Read);
                }
            }
        }
    }
}

impl Watch {
    /// A wait begins (a request was sent, or the server waits for the next request).
    #[inline]
    pub(crate) fn waiting(&mut self) {
        self.count += 1;
        self.watched.progress.store(self.count << 1 | 1, Ordering::Relaxed);
    }

    /// The wait ended with an answer.
    #[inline]
    pub(crate) fn answered(&mut self) {
        self.watched.progress.store(self.count << 1, Ordering::Relaxed);
    }

    /// Whether the watchdog shut the socket's read side down: every receive on it from now
    /// on returns end-of-file.
    #[inline]
    pub(crate) fn fired(&self) -> bool {
        self.watched.fired.load(Ordering::Relaxed)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        lock(&self.dog.watched).retain(|w| w.id != self.watched.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    /// Runs `body` with a watchdog thread ticking every 10 ms; `stop` is its stopping flag.
    fn with_dog(stop: &AtomicBool, body: impl FnOnce(&Arc<Watchdog>)) {
        let dog = Watchdog::new(Duration::from_millis(10));
        std::thread::scope(|scope| {
            let _closer = Closer(&dog);
            let runner = Arc::clone(&dog);
            scope.spawn(move || {
                runner.run(&|| stop.load(Ordering::Relaxed), Duration::from_millis(50))
            });
            body(&dog);
        });
    }

    #[test]
    fn a_wait_past_its_limit_is_woken_with_end_of_file() {
        let (mut client, _server) = pair();
        with_dog(&AtomicBool::new(false), |dog| {
            let mut watch = dog.watch(&client, Duration::from_millis(100)).unwrap();
            let start = Instant::now();
            watch.waiting();
            let mut buf = [0u8; 8];
            assert_eq!(client.read(&mut buf).unwrap(), 0, "woken by the shutdown");
            let waited = start.elapsed();
            assert!(watch.fired());
            assert!(waited >= Duration::from_millis(100), "fired early: {waited:?}");
        });
    }

    #[test]
    fn answered_waits_and_progress_are_never_fired() {
        let (mut client, mut server) = pair();
        with_dog(&AtomicBool::new(false), |dog| {
            let mut watch = dog.watch(&client, Duration::from_millis(60)).unwrap();
            // Twenty waits of 20 ms each: every one ends before the limit, though together
            // they last far longer than it.
            for i in 0..20u8 {
                watch.waiting();
                std::thread::sleep(Duration::from_millis(20));
                server.write_all(&[i]).unwrap();
                let mut b = [0u8; 1];
                client.read_exact(&mut b).unwrap();
                watch.answered();
            }
            // Not waiting: idle far past the limit, still not fired.
            std::thread::sleep(Duration::from_millis(150));
            assert!(!watch.fired());
        });
    }

    #[test]
    fn a_stop_fires_waiting_watches_after_the_grace() {
        let stop = AtomicBool::new(false);
        let (mut client, _server) = pair();
        with_dog(&stop, |dog| {
            let mut watch = dog.watch(&client, Duration::from_secs(3600)).unwrap();
            watch.waiting();
            let start = Instant::now();
            stop.store(true, Ordering::Relaxed);
            let mut buf = [0u8; 8];
            assert_eq!(client.read(&mut buf).unwrap(), 0);
            assert!(watch.fired());
            assert!(start.elapsed() >= Duration::from_millis(50), "grace not kept");
        });
    }

    #[test]
    fn a_dropped_watch_is_forgotten_and_its_socket_left_alone() {
        let (client, mut server) = pair();
        with_dog(&AtomicBool::new(false), |dog| {
            let mut watch = dog.watch(&client, Duration::from_millis(20)).unwrap();
            watch.waiting();
            drop(watch);
            assert!(lock(&dog.watched).is_empty());
            std::thread::sleep(Duration::from_millis(100));
            // The read side is still open: data sent now is received.
            server.write_all(b"x").unwrap();
            let mut b = [0u8; 1];
            (&client).read_exact(&mut b).unwrap();
        });
    }

    #[test]
    fn ticks_scale_with_the_limit() {
        let longest = Duration::from_millis(100);
        assert_eq!(Watchdog::tick_for(Duration::from_secs(10), longest), longest);
        assert_eq!(
            Watchdog::tick_for(Duration::from_millis(500), longest),
            Duration::from_millis(50)
        );
        assert_eq!(
            Watchdog::tick_for(Duration::from_millis(1), longest),
            Duration::from_millis(10)
        );
    }
}
