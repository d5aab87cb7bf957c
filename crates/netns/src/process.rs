//! [`Processes`]: child processes started inside namespaces, tracked until they are reaped.
//!
//! Every child is registered in the run's [`Cleanup`] the moment it is spawned, so a signal or
//! a leaked handle still kills it. [`Processes::kill_all`] (also run by `Drop`) sends SIGTERM,
//! waits up to a grace period, sends SIGKILL, and reaps every child, so no zombie or orphan
//! outlives the run.
//!
//! Every child is also started with `PR_SET_PDEATHSIG` = SIGKILL ([`crate::sys::die_with_parent`]):
//! when the run is SIGKILLed, and so can run no cleanup at all, its children die with it
//! instead of running on inside the namespaces. The signal is tied to the thread that spawned
//! the child, so [`Processes::spawn`] must be called from a thread that outlives the child (the
//! run's main thread). What the children started themselves is not covered (the death signal
//! is not inherited); it is killed with the namespace by the next lab command
//! ([`crate::clean_stale`]).
//!
//! By default a child gets its own process group ([`Group::Own`]) and signals go to the whole
//! group, which also reaches whatever the command started (a shell script's children). An
//! interactive command (`tcptail lab path -- bash`) must stay in the terminal's foreground
//! group instead ([`Group::Inherit`]): it then receives Ctrl-C from the terminal itself, and
//! only the child's own pid is signalled. Descendants that escape both (daemons that
//! `setsid`) are still caught by namespace teardown, which kills every process inside the
//! namespace.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use crate::Error;
use crate::cleanup::{Action, Cleanup, Token};

/// Default time between SIGTERM and SIGKILL in [`Processes::kill_all`] and `Drop`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

/// Which process group a child runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Group {
    /// A new process group led by the child; signals reach the command's descendants too.
    #[default]
    Own,
    /// The caller's process group (needed for interactive commands that read the terminal).
    Inherit,
}

/// A reaped child.
#[derive(Debug)]
pub struct Exited {
    /// The label given at spawn.
    pub label: String,
    /// Its pid.
    pub pid: u32,
    /// How it ended.
    pub status: ExitStatus,
}

struct Tracked {
    label: String,
    child: Child,
    group: bool,
    token: Token,
}

/// The set of children of one lab run; see the [module docs](self).
pub struct Processes {
    cleanup: Cleanup,
    children: Vec<Tracked>,
    grace: Duration,
}

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processes").field("pids", &self.pids()).field("grace", &self.grace).finish()
    }
}

/// Sends `sig` to `pid` (or its process group), ignoring "no such process".
pub(crate) fn send_signal(pid: u32, group: bool, sig: Signal) {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    // A `Group::Own` child called setpgid before exec, and `Command::spawn` returns only after
    // exec, so its group exists whenever we hold the pid.
    let _ = if group {
        rustix::process::kill_process_group(pid, sig)
    } else {
        rustix::process::kill_process(pid, sig)
    };
}

/// Whether a process with this pid exists (zombies count as existing).
pub fn is_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e != rustix::io::Errno::SRCH,
    }
}

impl Processes {
    /// An empty set whose children are registered in `cleanup`.
    pub fn new(cleanup: &Cleanup) -> Self {
        Processes { cleanup: cleanup.clone(), children: Vec::new(), grace: DEFAULT_GRACE }
    }

    /// Sets the SIGTERM-to-SIGKILL grace used by `Drop`.
    pub fn set_grace(&mut self, grace: Duration) {
        self.grace = grace;
    }

    /// The SIGTERM-to-SIGKILL grace used by `Drop`.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Spawns `cmd` (typically from [`crate::Netns::command`]) and tracks it. Returns its pid.
    /// The child is SIGKILLed if the calling thread dies first (see the [module docs](self)).
    pub fn spawn(&mut self, label: &str, mut cmd: Command, group: Group) -> Result<u32, Error> {
        if group == Group::Own {
            cmd.process_group(0);
        }
        crate::sys::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|source| Error::Spawn { command: format!("{label}: {:?}", cmd), source })?;
        let pid = child.id();
        let own = group == Group::Own;
        let token = self.cleanup.register(Action::Process { pid, group: own });
        self.children.push(Tracked { label: label.to_owned(), child, group: own, token });
        Ok(pid)
    }

    /// Pids of the children not yet reaped.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|t| t.child.id()).collect()
    }

    /// Whether no child is tracked.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    fn index(&self, pid: u32) -> Result<usize, Error> {
        self.children.iter().position(|t| t.child.id() == pid).ok_or(Error::UnknownProcess { pid })
    }

    fn finish(&mut self, i: usize, status: ExitStatus) -> Exited {
        let t = self.children.remove(i);
        let _ = self.cleanup.cancel(t.token);
        // Nothing is signalled once the leader is reaped (its pid may be reused); whatever it
        // left behind in the namespace is killed when the namespace is torn down.
        Exited { label: t.label, pid: t.child.id(), status }
    }

    /// Blocks until the child `pid` exits, reaps it and stops tracking it. A signal handled by
    /// [`crate::signal`] terminates registered children, so this returns on Ctrl-C too.
    pub fn wait(&mut self, pid: u32) -> Result<Exited, Error> {
        let i = self.index(pid)?;
        let t = &mut self.children[i];
        let status = t.child.wait().map_err(|source| Error::Process {
            label: t.label.clone(),
            pid,
            op: "wait",
            source,
        })?;
        Ok(self.finish(i, status))
    }

    /// Reaps the child `pid` if it has exited.
    pub fn try_wait(&mut self, pid: u32) -> Result<Option<Exited>, Error> {
        let i = self.index(pid)?;
        let t = &mut self.children[i];
        let status = t.child.try_wait().map_err(|source| Error::Process {
            label: t.label.clone(),
            pid,
            op: "wait",
            source,
        })?;
        Ok(status.map(|s| self.finish(i, s)))
    }

    /// Sends `sig` to one child (its group, for [`Group::Own`]).
    pub fn signal(&self, pid: u32, sig: Signal) -> Result<(), Error> {
        let t = &self.children[self.index(pid)?];
        send_signal(pid, t.group, sig);
        Ok(())
    }

    /// SIGTERM to every child, SIGKILL to those still running after `grace`, and reaps all of
    /// them. Returns how each ended.
    ///
    /// A child's own process group is signalled as a whole, and `kill_all` returns only once
    /// no process of those groups is left running (bounded by [`KILL_SETTLE`]): a descendant
    /// that ignores SIGTERM (a shell's `trap '' TERM` is inherited by what it starts) is sent
    /// SIGKILL with the rest, even when its leader already exited, and a SIGKILLed process
    /// is only gone once the scheduler has run it, which on a loaded host can be after the
    /// leader was reaped.
    pub fn kill_all(&mut self, grace: Duration) -> Vec<Exited> {
        let mut done = Vec::new();
        let groups: Vec<u32> =
            self.children.iter().filter(|t| t.group).map(|t| t.child.id()).collect();
        for t in &self.children {
            send_signal(t.child.id(), t.group, Signal::TERM);
        }
        let deadline = Instant::now() + grace;
        while !self.children.is_empty() {
            let mut i = 0;
            while i < self.children.len() {
                match self.children[i].child.try_wait() {
                    Ok(Some(status)) => done.push(self.finish(i, status)),
                    Ok(None) => i += 1,
                    Err(_) => {
                        // Not our child any more (reaped elsewhere): stop tracking it.
                        let t = self.children.remove(i);
                        let _ = self.cleanup.cancel(t.token);
                    }
                }
            }
            if self.children.is_empty() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        while let Some(t) = self.children.last_mut() {
            send_signal(t.child.id(), t.group, Signal::KILL);
            let status = t.child.wait();
            let i = self.children.len() - 1;
            match status {
                Ok(status) => done.push(self.finish(i, status)),
                Err(_) => {
                    let t = self.children.remove(i);
                    let _ = self.cleanup.cancel(t.token);
                }
            }
        }
        // What is left of the groups: descendants that outlived their leader.
        for &group in &groups {
            if group_has_live_members(group) {
                send_signal(group, true, Signal::KILL);
            }
        }
        let deadline = Instant::now() + KILL_SETTLE;
        while groups.iter().any(|&g| group_has_live_members(g)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        done
    }
}

/// How long [`Processes::kill_all`] waits, after SIGKILL, for the rest of its children's
/// process groups to be gone. A SIGKILLed process dies as soon as it is scheduled; this only
/// bounds the wait on a host so loaded that it is not.
pub const KILL_SETTLE: Duration = Duration::from_secs(5);

/// Whether any process in process group `pgid` is still running. Zombies do not count: they
/// hold nothing and wait for their parent (or init, for orphans) to reap them.
fn group_has_live_members(pgid: u32) -> bool {
    let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    // The cheap answer first: no process at all in the group.
    if rustix::process::test_kill_process_group(pid) == Err(rustix::io::Errno::SRCH) {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .any(|stat| {
            // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
            let mut rest = stat.rsplit_once(')').map_or("", |(_, r)| r).split_whitespace();
            let (state, pgrp) = (rest.next(), rest.nth(1));
            pgrp == Some(pgid.to_string().as_str()) && !matches!(state, Some("Z" | "X"))
        })
}

impl Drop for Processes {
    fn drop(&mut self) {
        let grace = self.grace;
        self.kill_all(grace);
    }
}
