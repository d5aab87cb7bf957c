//! The crate's one error type.
//!
//! One variant per failure a caller can act on; each names the namespace, command, sysctl or
//! device at fault. Teardown paths (`Drop`) never return errors: they report them on stderr and
//! carry on, because a half-finished teardown is worse than a noisy one.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while building, using or tearing down lab plumbing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The process is not root (effective uid != 0).
    #[error(
        "tcptail lab needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN) to create network namespaces; \
         run it with sudo"
    )]
    NotRoot,

    /// The process is root but lacks a capability (typically an unprivileged container).
    #[error(
        "tcptail lab needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN) to create network namespaces; \
         this process is root but lacks {capability} (a container started without \
         --privileged or --cap-add?)"
    )]
    MissingCapability {
        /// The missing capability, e.g. `CAP_SYS_ADMIN`.
        capability: &'static str,
    },

    /// `ip` from iproute2 is not installed or not on `PATH`.
    #[error("`ip` from iproute2 was not found on PATH; install iproute2")]
    IpMissing,

    /// A role name that cannot be part of a namespace name.
    #[error("invalid namespace role {role:?}: use 1 to 32 characters from [A-Za-z0-9_-]")]
    InvalidRole {
        /// The rejected role.
        role: String,
    },

    /// An external command could not be started.
    #[error("could not run `{command}`")]
    Spawn {
        /// The command line.
        command: String,
        /// Why it could not be started.
        #[source]
        source: io::Error,
    },

    /// An external command ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its exit status, as text.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },

    /// A namespace operation (open, enter, delete, list) failed.
    #[error("network namespace {name}: {op}")]
    Namespace {
        /// The namespace name.
        name: String,
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// Opening or configuring a TUN device failed.
    #[error("TUN device {ifname} in namespace {netns}: {op}")]
    Tun {
        /// The interface name.
        ifname: String,
        /// The namespace it was to be created in.
        netns: String,
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A sysctl key that is not a per-network-namespace (`net.`) key, or is malformed.
    #[error(
        "sysctl {key:?} is not a per-namespace network sysctl (must start with `net.` and \
         contain only [A-Za-z0-9_.-]); writing it from a namespace could change the host"
    )]
    InvalidSysctl {
        /// The rejected key.
        key: String,
    },

    /// Reading or writing a sysctl file failed.
    #[error("sysctl {key} in namespace {netns}: cannot {op} {path}")]
    Sysctl {
        /// The sysctl key, dotted.
        key: String,
        /// The namespace.
        netns: String,
        /// `read` or `write`.
        op: &'static str,
        /// The `/proc/sys` file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A sysctl write was accepted but the value read back differs.
    #[error("sysctl {key} in namespace {netns}: wrote {wanted:?} but it reads back {actual:?}")]
    SysctlNotApplied {
        /// The sysctl key.
        key: String,
        /// The namespace.
        netns: String,
        /// The value written (whitespace-normalised).
        wanted: String,
        /// The value read back (whitespace-normalised).
        actual: String,
    },

    /// Waiting for or signalling a child process failed.
    #[error("process {label} (pid {pid}): {op}")]
    Process {
        /// The label given at spawn time.
        label: String,
        /// Its pid.
        pid: u32,
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A pid passed to [`crate::Processes`] is not one of its children.
    #[error("pid {pid} is not a tracked child process")]
    UnknownProcess {
        /// The pid.
        pid: u32,
    },

    /// Installing the SIGINT/SIGTERM/SIGHUP handlers failed.
    #[error("installing the SIGINT/SIGTERM/SIGHUP handlers")]
    Signal(#[source] io::Error),

    /// A scratch thread could not be started.
    #[error("starting a scratch thread for namespace {name}")]
    Thread {
        /// The namespace.
        name: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn namespace(name: &str, op: &'static str, source: io::Error) -> Self {
        Error::Namespace { name: name.to_owned(), op, source }
    }
}
