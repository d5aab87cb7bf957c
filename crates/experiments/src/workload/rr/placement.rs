//! Where the client and server threads of a request/response round run.
//!
//! On this class of machine (a small KVM guest whose idle vCPUs halt) placement decides the
//! latency more than TCP does: two threads pinned to the **same** vCPU hand each request over
//! without waking a halted vCPU, two threads on different vCPUs pay that wake-up on every
//! message (see `notes/latency.md`). Every engine that measures latency therefore makes
//! placement an explicit parameter and records where each end actually ran.

use tcptail_bench::sys;

use crate::params::{ParamError, Params};

/// The placement of the two ends of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Neither end pinned: the scheduler decides.
    Free,
    /// Both ends pinned to this CPU.
    SameCpu(usize),
    /// The client pinned to `client`, the server to `server` (different CPUs).
    Split {
        /// The client's CPU.
        client: usize,
        /// The server's CPU.
        server: usize,
    },
}

impl Placement {
    /// Reads `placement` (`same-cpu`, `split`, `free`; `default` when absent) and `cpu` (the
    /// server's CPU; default the last CPU this process may use). With `split`, the client runs
    /// on the first other allowed CPU.
    pub fn from_params(params: &Params, default: &str) -> Result<Placement, ParamError> {
        let kind = params
            .choice("placement", &["same-cpu", "split", "free"])?
            .unwrap_or_else(|| default.to_owned());
        let cpu = params.uint("cpu", 4095)?.map(|c| c as usize);
        Placement::resolve(&kind, cpu)
    }

    /// The placement `kind` (`same-cpu`, `split`, `free`) with the server on `cpu` (default:
    /// the last CPU this process may use); errors name the `cpu` or `placement` key.
    pub fn resolve(kind: &str, cpu: Option<usize>) -> Result<Placement, ParamError> {
        let allowed = sys::allowed_cpus().unwrap_or_default();
        if let Some(c) = cpu {
            if kind == "free" {
                return Err(ParamError::new("cpu", "has no effect when nothing is pinned"));
            }
            if !allowed.contains(&c) {
                return Err(ParamError::new(
                    "cpu",
                    format!("CPU {c} is not one this process may run on ({allowed:?})"),
                ));
            }
        }
        let server = cpu.or_else(|| allowed.last().copied());
        let no_cpu = || ParamError::new("placement", "no CPU is allowed");
        Ok(match kind {
            "free" => Placement::Free,
            "same-cpu" => Placement::SameCpu(server.ok_or_else(no_cpu)?),
            _ => {
                let server = server.ok_or_else(no_cpu)?;
                let client = allowed.iter().copied().find(|&c| c != server).ok_or_else(|| {
                    ParamError::new("placement", "`split` needs two CPUs; this process has one")
                })?;
                Placement::Split { client, server }
            }
        })
    }

    /// The client's CPU, if pinned.
    pub fn client_cpu(self) -> Option<usize> {
        match self {
            Placement::Free => None,
            Placement::SameCpu(c) => Some(c),
            Placement::Split { client, .. } => Some(client),
        }
    }

    /// The server's CPU, if pinned.
    pub fn server_cpu(self) -> Option<usize> {
        match self {
            Placement::Free => None,
            Placement::SameCpu(c) => Some(c),
            Placement::Split { server, .. } => Some(server),
        }
    }

    /// A CPU neither end is pinned to, for background work (competing flows) that should
    /// share the network path but not the measured threads' CPU. `None` when both ends are
    /// free or every CPU is taken.
    pub fn spare_cpu(self) -> Option<usize> {
        let taken = [self.client_cpu(), self.server_cpu()];
        if taken == [None, None] {
            return None;
        }
        sys::allowed_cpus().unwrap_or_default().into_iter().find(|c| !taken.contains(&Some(*c)))
    }

    /// One phrase for reports: "client and server pinned to CPU 1".
    pub fn describe(self) -> String {
        match self {
            Placement::Free => "client and server not pinned".to_owned(),
            Placement::SameCpu(c) => format!("client and server pinned to the same CPU {c}"),
            Placement::Split { client, server } => {
                format!("client pinned to CPU {client}, server to CPU {server}")
            }
        }
    }
}

/// "CPU 1" / "CPUs 0, 1" / "an unknown CPU", for notes about where a thread was seen.
pub fn cpus_phrase(cpus: &[usize]) -> String {
    match cpus {
        [] => "an unknown CPU".to_owned(),
        [c] => format!("CPU {c}"),
        many => {
            let list: Vec<String> = many.iter().map(usize::to_string).collect();
            format!("CPUs {}", list.join(", "))
        }
    }
}
