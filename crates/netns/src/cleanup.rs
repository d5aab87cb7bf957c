//! The cleanup registry: everything a lab run creates is registered here the moment it exists,
//! so it can be removed on every exit path.
//!
//! A [`Cleanup`] is a cheap, clonable handle to one registry (one per lab run). Resources
//! ([`crate::Netns`], [`crate::Processes`], [`crate::Topology`]) register an action when they
//! create something and cancel it when they tear it down themselves. What is left in the
//! registry is run:
//!
//! | exit path | who removes things |
//! |---|---|
//! | normal return | the resources' own `Drop` (reverse creation order); the registry is empty |
//! | `?`/error return | same: `Drop` runs while the error propagates |
//! | panic (unwinding) | same: `Drop` runs during unwinding. With `panic = "abort"` nothing unwinds, so [`crate::signal::install`] adds a panic hook that runs every registry |
//! | SIGINT/SIGTERM/SIGHUP | [`crate::signal`]'s watcher thread: SIGTERM to registered processes at once, the whole registry after the grace period (see there) |
//! | the last `Cleanup` handle dropped with actions left (e.g. a leaked resource) | the registry runs them |
//! | SIGKILL, power loss | nothing can run; [`crate::clean_stale`] removes leftovers later |
//!
//! Actions run last-registered-first and each registered action runs at most once. Every
//! teardown step is idempotent (deleting a deleted namespace, signalling a dead process group),
//! and owners tear down *first* and [`Cleanup::cancel`] *afterwards*. So when the signal
//! watcher's forced run races with an owner's `Drop`, a step may run twice but is never skipped,
//! and the watcher cannot exit the process between an owner deregistering a resource and
//! finishing its removal.
//!
//! Forced runs are blunt: processes get SIGKILL (their graceful SIGTERM was the owner's job, or
//! the signal watcher's at the start of the grace period) and namespaces are deleted after
//! killing whatever still runs inside them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use rustix::process::Signal;

/// One teardown step.
pub(crate) enum Action {
    /// A child process (and, with `group`, its whole process group).
    Process { pid: u32, group: bool },
    /// A named network namespace.
    Netns { name: String },
    /// Anything else the caller registered with [`Cleanup::defer`].
    Custom { label: String, f: Box<dyn FnOnce() + Send> },
}

impl Action {
    fn execute(self) {
        match self {
            Action::Process { pid, group } => {
                crate::process::send_signal(pid, group, Signal::KILL);
            }
            Action::Netns { name } => {
                if let Err(e) = crate::netns::destroy(&name) {
                    eprintln!("tcptail: cleanup: {e}");
                }
            }
            Action::Custom { label, f } => {
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
                    eprintln!("tcptail: cleanup: action {label:?} panicked");
                }
            }
        }
    }
}

struct Entry {
    token: u64,
    action: Action,
}

struct Inner {
    entries: Mutex<Vec<Entry>>,
    next: AtomicU64,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) -> usize {
        // Take everything first so concurrent `cancel`s see it as gone, then execute outside
        // the lock (destroying a namespace takes milliseconds to seconds).
        let taken = std::mem::take(&mut *self.lock());
        let n = taken.len();
        for entry in taken.into_iter().rev() {
            entry.action.execute();
        }
        n
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.run();
    }
}

/// Every registry alive in the process, for the signal watcher and the abort-panic hook.
static LIVE: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

/// A handle to a cleanup registry; see the [module docs](self).
#[derive(Clone)]
pub struct Cleanup {
    inner: Arc<Inner>,
}

/// Identifies one registered action, for [`Cleanup::cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "an action that is never cancelled runs when the registry does"]
pub struct Token(u64);

impl Default for Cleanup {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Cleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cleanup").field("pending", &self.pending()).finish()
    }
}

impl Cleanup {
    /// A new, empty registry, visible to the signal watcher.
    pub fn new() -> Self {
        let inner = Arc::new(Inner { entries: Mutex::new(Vec::new()), next: AtomicU64::new(1) });
        let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&inner));
        Cleanup { inner }
    }

    pub(crate) fn register(&self, action: Action) -> Token {
        let token = self.inner.next.fetch_add(1, Ordering::Relaxed);
        self.inner.lock().push(Entry { token, action });
        Token(token)
    }

    /// Registers `f` to run when the registry runs (e.g. stopping an emulator thread). It runs
    /// at most once; a panic inside it is caught and reported.
    pub fn defer(&self, label: impl Into<String>, f: impl FnOnce() + Send + 'static) -> Token {
        self.register(Action::Custom { label: label.into(), f: Box::new(f) })
    }

    /// Removes an action without running it (call it after tearing the resource down
    /// yourself). Returns `false` if it was no longer registered (already run or cancelled).
    pub fn cancel(&self, token: Token) -> bool {
        let mut entries = self.inner.lock();
        match entries.iter().position(|e| e.token == token.0) {
            Some(i) => {
                entries.remove(i);
                true
            }
            None => false,
        }
    }

    /// Number of actions still registered.
    pub fn pending(&self) -> usize {
        self.inner.lock().len()
    }

    /// Runs every registered action now, last registered first, and returns how many ran.
    /// Processes get SIGKILL. Safe to call repeatedly and concurrently with `Drop`s.
    pub fn run(&self) -> usize {
        self.inner.run()
    }

    /// Sends SIGTERM to every registered process (group) and leaves them registered: the
    /// graceful first step of a signal-triggered shutdown.
    pub(crate) fn terminate_processes(&self) {
        for entry in self.inner.lock().iter() {
            if let Action::Process { pid, group } = entry.action {
                crate::process::send_signal(pid, group, Signal::TERM);
            }
        }
    }
}

/// Every registry still alive in this process.
pub(crate) fn live() -> Vec<Cleanup> {
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter_map(Weak::upgrade)
        .map(|inner| Cleanup { inner })
        .collect()
}

/// Runs every live registry in the process (the forced path of a signal or an aborting
/// panic). Returns how many actions ran.
pub fn run_all() -> usize {
    live().iter().map(Cleanup::run).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn runs_lifo_once_and_cancel_prevents() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let c = Cleanup::new();
        for i in 0..3 {
            let order = Arc::clone(&order);
            let _ = c.defer(format!("a{i}"), move || order.lock().unwrap().push(i));
        }
        let t = c.defer("cancelled", || panic!("must not run"));
        assert!(c.cancel(t));
        assert!(!c.cancel(t));
        assert_eq!(c.pending(), 3);
        assert_eq!(c.run(), 3);
        assert_eq!(c.run(), 0);
        assert_eq!(*order.lock().unwrap(), vec![2, 1, 0]);
    }

    #[test]
    fn last_handle_drop_runs_leftovers_and_panics_are_contained() {
        let ran = Arc::new(AtomicUsize::new(0));
        let c = Cleanup::new();
        let c2 = c.clone();
        let r = Arc::clone(&ran);
        let _ = c.defer("count", move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        let _ = c.defer("boom", || panic!("contained"));
        drop(c);
        assert_eq!(ran.load(Ordering::SeqCst), 0, "a handle is still alive");
        drop(c2);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn live_registries_are_visible_until_dropped() {
        let c = Cleanup::new();
        let _ = c.defer("x", || {});
        assert!(live().iter().any(|l| Arc::ptr_eq(&l.inner, &c.inner)));
        let weak = Arc::downgrade(&c.inner);
        drop(c);
        assert!(weak.upgrade().is_none());
    }
}
