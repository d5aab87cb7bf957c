//! [`Netns`]: one named network namespace, owned, with a unique name, deleted on `Drop`.
//!
//! # Names
//!
//! Every namespace is named `tcptail-<pid>-<role>-<n>` ([`PREFIX`], the creating process's pid,
//! a caller-chosen role such as `client`, and a per-process counter), so concurrent runs and
//! concurrent tests never collide, and [`crate::clean_stale`] can tell a crashed run's leftovers
//! (owner pid dead) from a live run's namespaces.
//!
//! # How things run "inside" a namespace
//!
//! - Code: [`Netns::run`] runs a closure on a scratch thread that has `setns`'d into the
//!   namespace; the thread then exits, so no thread of the caller ever changes namespace.
//!   Sockets and TUN descriptors created there stay in that namespace after the thread exits
//!   and can be used from any thread.
//! - Per-namespace files: `/proc/sys/net/...` resolves against the namespace of the *thread*
//!   that opens it, so sysctls are read and written from such a scratch thread (see
//!   [`Netns::set_sysctl`]). `/proc/net` (= `/proc/self/net`) follows the *thread-group
//!   leader* instead; from a scratch thread use `/proc/thread-self/net`.
//! - Commands: [`Netns::ip`] runs `ip -n NAME ...`; [`Netns::command`] prepares
//!   `ip netns exec NAME program ...`, which also remounts `/sys` for that namespace and then
//!   `exec`s the program, so the child's pid is the program's pid.
//!
//! # Teardown
//!
//! `Drop` (or [`Netns::delete`]) first stops every process whose network namespace is this one
//! (SIGTERM, then SIGKILL after [`KILL_GRACE`]), then runs `ip netns del`. A namespace with no
//! name and no processes left is freed by the kernel once the last descriptor into it (a socket
//! or TUN fd someone still holds) is closed.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::cleanup::{Action, Cleanup, Token};
use crate::{Error, sys};

/// Prefix of every namespace and link this crate creates.
pub const PREFIX: &str = "tcptail-";

/// Where iproute2 keeps named namespaces (bind mounts of nsfs files).
pub const NETNS_DIR: &str = "/run/netns";

/// How long processes left in a namespace get between SIGTERM and SIGKILL at teardown.
pub const KILL_GRACE: Duration = Duration::from_millis(1000);

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// An owned, named network namespace; see the [module docs](self).
#[derive(Debug)]
pub struct Netns {
    name: String,
    file: Option<File>,
    cleanup: Cleanup,
    token: Option<Token>,
}

/// Checks a role: 1 to 32 characters from `[A-Za-z0-9_-]`.
pub fn validate_role(role: &str) -> Result<(), Error> {
    let ok = (1..=32).contains(&role.len())
        && role.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok { Ok(()) } else { Err(Error::InvalidRole { role: role.to_owned() }) }
}

/// The pid a `tcptail-<pid>-...` name claims as its owner, if it has that shape.
pub fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, _) = rest.split_once('-')?;
    pid.parse().ok().filter(|&p| p > 0)
}

impl Netns {
    /// Creates `tcptail-<pid>-<role>-<n>` with `ip netns add`, registered in `cleanup`.
    pub fn create(cleanup: &Cleanup, role: &str) -> Result<Netns, Error> {
        validate_role(role)?;
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{PREFIX}{}-{role}-{n}", std::process::id());
        // Register before creating: deleting a namespace that does not exist is a no-op, and
        // this way there is no window in which the namespace exists unregistered.
        let token = cleanup.register(Action::Netns { name: name.clone() });
        let mut ns = Netns { name, file: None, cleanup: cleanup.clone(), token: Some(token) };
        // iproute2 itself flocks /run/netns while it sets it up as a shared bind mount, so
        // concurrent `ip netns add`s (threads or processes) need no extra locking here.
        run_cmd(Command::new("ip").args(["netns", "add", &ns.name]), None)?;
        let file = File::open(ns.path()).map_err(|e| Error::namespace(&ns.name, "open", e))?;
        ns.file = Some(file);
        Ok(ns)
    }

    /// The namespace's name, as used by `ip netns`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/<name>`.
    pub fn path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.name)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_ref().expect("a Netns holds its descriptor until teardown").as_fd()
    }

    /// Runs `f` on a scratch thread that has entered this namespace and returns its result.
    /// A panic in `f` is propagated to the caller.
    pub fn run<F, T>(&self, f: F) -> Result<T, Error>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        let fd = self.fd();
        std::thread::scope(|s| {
            let handle = std::thread::Builder::new()
                .name("tcptail-netns".into())
                .spawn_scoped(s, move || sys::enter_netns(fd).map(|()| f()))
                .map_err(|source| Error::Thread { name: self.name.clone(), source })?;
            match handle.join() {
                Ok(result) => result.map_err(|e| Error::namespace(&self.name, "enter (setns)", e)),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Runs `ip -n NAME args...` and returns its standard output.
    pub fn ip<I, S>(&self, args: I) -> Result<String, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        run_cmd(Command::new("ip").args(["-n", &self.name]).args(args), None)
    }

    /// Runs several `ip` commands in one process (`ip -n NAME -batch -`), one per line, each
    /// without the leading `ip`. Stops at the first failing line.
    pub fn ip_batch<S: AsRef<str>>(&self, lines: &[S]) -> Result<(), Error> {
        let mut script = String::new();
        for line in lines {
            script.push_str(line.as_ref());
            script.push('\n');
        }
        let mut cmd = Command::new("ip");
        cmd.args(["-n", &self.name, "-batch", "-"]);
        run_cmd(&mut cmd, Some(script.as_bytes())).map(drop)
    }

    /// A [`Command`] that runs `program` inside this namespace (`ip netns exec NAME program`).
    /// Add arguments, environment and stdio as usual, then spawn it through
    /// [`crate::Processes::spawn`] so it is tracked and cleaned up.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs `program args...` inside the namespace to completion and returns its standard
    /// output (e.g. `tc`, `ss`, `sysctl`).
    pub fn exec<I, S>(&self, program: &str, args: I) -> Result<String, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        run_cmd(self.command(program).args(args), None)
    }

    /// Pids of the processes whose network namespace is this one.
    pub fn pids(&self) -> Result<Vec<u32>, Error> {
        let meta = self
            .file
            .as_ref()
            .map(File::metadata)
            .transpose()
            .map_err(|e| Error::namespace(&self.name, "stat", e))?;
        Ok(meta.map_or_else(Vec::new, |m| pids_in((m.dev(), m.ino()))))
    }

    /// Deletes the namespace now, reporting errors (`Drop` does the same but can only print).
    pub fn delete(mut self) -> Result<(), Error> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), Error> {
        self.file = None;
        let Some(token) = self.token.take() else {
            return Ok(());
        };
        // Delete first, deregister after. Deletion is idempotent, so a forced cleanup racing
        // with this (the signal watcher) at worst repeats it; deregistering first would let
        // the watcher skip it and exit the process while our deletion is still under way.
        let result = destroy(&self.name);
        let _ = self.cleanup.cancel(token);
        result
    }
}

impl AsFd for Netns {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("tcptail: {e}");
        }
    }
}

/// Names of all namespaces under `/run/netns` starting with [`PREFIX`].
pub fn list() -> Result<Vec<String>, Error> {
    let entries = match fs::read_dir(NETNS_DIR) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::namespace(NETNS_DIR, "list", e)),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    names.sort();
    Ok(names)
}

/// Whether `/run/netns/<name>` exists.
pub fn exists(name: &str) -> bool {
    Path::new(NETNS_DIR).join(name).exists()
}

/// Stops every process in the namespace `name`, then `ip netns del`s it. A namespace that is
/// already gone is not an error.
pub(crate) fn destroy(name: &str) -> Result<(), Error> {
    let path = Path::new(NETNS_DIR).join(name);
    let Ok(meta) = fs::metadata(&path) else {
        return Ok(());
    };
    stop_pids((meta.dev(), meta.ino()), KILL_GRACE);
    match run_cmd(Command::new("ip").args(["netns", "del", name]), None) {
        Ok(_) => Ok(()),
        Err(_) if !path.exists() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Pids (other than our own) whose `/proc/<pid>/ns/net` is the namespace with inode `id`.
fn pids_in(id: (u64, u64)) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            // Zombies have no namespaces any more, so this fails for them, as it should.
            fs::metadata(format!("/proc/{pid}/ns/net")).is_ok_and(|m| (m.dev(), m.ino()) == id)
        })
        .collect()
}

/// SIGTERM to every process in the namespace, SIGKILL to what is left after `grace`.
fn stop_pids(id: (u64, u64), grace: Duration) {
    let mut pids = pids_in(id);
    if pids.is_empty() {
        return;
    }
    for &pid in &pids {
        crate::process::send_signal(pid, false, Signal::TERM);
    }
    let deadline = Instant::now() + grace;
    while !pids.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        pids = pids_in(id);
    }
    for &pid in &pids {
        crate::process::send_signal(pid, false, Signal::KILL);
    }
    let deadline = Instant::now() + grace;
    while !pids_in(id).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` (with `stdin` fed if given) and returns its stdout, or a typed error that names
/// the command and carries its stderr.
pub(crate) fn run_cmd(cmd: &mut Command, stdin: Option<&[u8]>) -> Result<String, Error> {
    let line = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let spawn_err = |source: io::Error| {
        if source.kind() == io::ErrorKind::NotFound && cmd_is_ip(&line) {
            Error::IpMissing
        } else {
            Error::Spawn { command: line.clone(), source }
        }
    };
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(spawn_err)?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input).map_err(spawn_err)?;
    }
    let out = child.wait_with_output().map_err(spawn_err)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Command {
            command: line,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

fn cmd_is_ip(line: &str) -> bool {
    line == "ip" || line.starts_with("ip ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_parses_only_our_shape() {
        assert_eq!(owner_pid("tcptail-1234-client-0"), Some(1234));
        assert_eq!(owner_pid("tcptail-1234-a-b-c-7"), Some(1234));
        assert_eq!(owner_pid("tcptail-0-x-1"), None);
        assert_eq!(owner_pid("tcptail-abc-x-1"), None);
        assert_eq!(owner_pid("tcptail-1234"), None);
        assert_eq!(owner_pid("other-1234-x-1"), None);
    }

    #[test]
    fn roles_are_validated() {
        assert!(validate_role("client").is_ok());
        assert!(validate_role("r_1-x").is_ok());
        for bad in ["", "a b", "a/b", "a.b", &"x".repeat(33)] {
            assert!(validate_role(bad).is_err(), "{bad:?}");
        }
    }
}
