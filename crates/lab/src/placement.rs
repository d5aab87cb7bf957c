//! Where a lab path's work runs on the machine's CPUs: the built-in emulator pinned to one
//! CPU, the namespaces' receive processing steered to the others, and the endpoints (the lab's
//! commands, an experiment's flows) kept off the emulator's CPU.
//!
//! Why (issue 13, `scripts/bench-emulator` (c), 2026-11-27): behind seed 002's 10 Gbit/s x
//! 120 ms path the one emulator thread needs most of a CPU, and every TUN write it makes runs
//! the receiving namespace's TCP stack and the wake-up of its reader in its own softirq unless
//! receive packet steering hands that to another CPU. Pinned and steered, one BBR flow met the
//! target in 4 of 6 runs; unpinned, or pinned or steered alone, in none of 9.
//!
//! A [`PlacementRequest`] is what the user asked (`--emulator-cpu 1|last`, `--steer`,
//! `--endpoints-apart`; `emulator_cpu`, `steer`, `endpoints_apart` in experiment files);
//! [`PlacementRequest::resolve`] checks it against this machine (online CPUs, this process's
//! allowed set) and names the CPUs: a [`Placement`], which [`crate::LivePath`] applies and
//! reports record. Nothing here changes anything; the receive steering is written inside the
//! lab's own namespaces and goes with them.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::path::ArgError;

/// The emulator's CPU as asked: a number, or the highest-numbered usable CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuChoice {
    /// This CPU.
    Index(usize),
    /// The highest-numbered CPU that is online and allowed to this process.
    Last,
}

impl FromStr for CpuChoice {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<CpuChoice, ArgError> {
        let s = s.trim();
        if s == "last" {
            return Ok(CpuChoice::Last);
        }
        s.parse::<usize>()
            .map(CpuChoice::Index)
            .map_err(|_| ArgError::new(format!("'{s}' is not a CPU number (0, 1, ...) or last")))
    }
}

impl fmt::Display for CpuChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuChoice::Index(c) => write!(f, "{c}"),
            CpuChoice::Last => f.write_str("last"),
        }
    }
}

/// What the user asked for; see the [module docs](self). `Default` asks for nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlacementRequest {
    /// Pin the emulator's thread(s) to this CPU.
    pub emulator_cpu: Option<CpuChoice>,
    /// Steer both namespaces' receive processing (RPS on the TUN devices) to the other CPUs.
    pub steer: bool,
    /// Run the endpoints (the lab's commands, an experiment's flows) on the other CPUs only.
    pub endpoints_apart: bool,
}

/// One of the placement options, whatever a front end calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementOption {
    /// [`PlacementRequest::emulator_cpu`].
    EmulatorCpu,
    /// [`PlacementRequest::steer`].
    Steer,
    /// [`PlacementRequest::endpoints_apart`].
    EndpointsApart,
}

/// How a front end names the placement options: `tcptail lab path`'s flags, or experiment
/// files' keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// `--emulator-cpu`, `--steer`, `--endpoints-apart`.
    Flag,
    /// `emulator_cpu`, `steer`, `endpoints_apart`.
    Key,
}

impl PlacementOption {
    /// The option as `lab path` spells it: `--emulator-cpu`, `--steer`, `--endpoints-apart`.
    pub fn flag(self) -> &'static str {
        self.spelled(Spelling::Flag)
    }

    /// The option as experiment files spell it: `emulator_cpu`, `steer`, `endpoints_apart`.
    pub fn key(self) -> &'static str {
        self.spelled(Spelling::Key)
    }

    /// The option as `spelling` spells it.
    pub fn spelled(self, spelling: Spelling) -> &'static str {
        match (self, spelling) {
            (PlacementOption::EmulatorCpu, Spelling::Flag) => "--emulator-cpu",
            (PlacementOption::EmulatorCpu, Spelling::Key) => "emulator_cpu",
            (PlacementOption::Steer, Spelling::Flag) => "--steer",
            (PlacementOption::Steer, Spelling::Key) => "steer",
            (PlacementOption::EndpointsApart, Spelling::Flag) => "--endpoints-apart",
            (PlacementOption::EndpointsApart, Spelling::Key) => "endpoints_apart",
        }
    }
}

/// Why a [`PlacementRequest`] cannot be met on this machine. It names the option at fault
/// ([`Self::option`]); its text names options as `lab path` spells them, and
/// [`Self::spelled`] as another front end does (experiment keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlacementError {
    /// `--steer` or `--endpoints-apart` without an emulator CPU to keep things apart from.
    NeedsEmulatorCpu {
        /// [`PlacementOption::Steer`] or [`PlacementOption::EndpointsApart`].
        option: PlacementOption,
    },
    /// The CPU does not exist, is offline, or is outside this process's allowed set.
    Unusable {
        /// The CPU asked for.
        cpu: usize,
        /// offline / does not exist / not in this process's CPU set.
        why: &'static str,
        /// The usable CPUs, as a list (`0-1`).
        usable: String,
    },
    /// One usable CPU: pinning the emulator would leave none for the endpoints.
    OneCpu {
        /// The usable CPU.
        usable: String,
    },
    /// The machine's CPUs could not be read.
    Read(String),
}

impl PlacementError {
    /// The option at fault: the emulator's CPU, or the option that needs one.
    pub fn option(&self) -> PlacementOption {
        match self {
            PlacementError::NeedsEmulatorCpu { option } => *option,
            _ => PlacementOption::EmulatorCpu,
        }
    }

    /// The problem in words, naming options as `spelling` does (`Display` is
    /// [`Spelling::Flag`]'s).
    pub fn spelled(&self, spelling: Spelling) -> impl fmt::Display + '_ {
        SpelledError { error: self, spelling }
    }
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.spelled(Spelling::Flag).fmt(f)
    }
}

impl std::error::Error for PlacementError {}

/// [`PlacementError::spelled`].
struct SpelledError<'a> {
    error: &'a PlacementError,
    spelling: Spelling,
}

impl fmt::Display for SpelledError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let emulator_cpu = PlacementOption::EmulatorCpu.spelled(self.spelling);
        match self.error {
            PlacementError::NeedsEmulatorCpu { .. } => {
                let asked = match self.spelling {
                    Spelling::Flag => "--emulator-cpu N|last",
                    Spelling::Key => "emulator_cpu = N or \"last\"",
                };
                write!(f, "needs {asked}: it moves work to the CPUs other than the emulator's")
            }
            PlacementError::Unusable { cpu, why, usable } => write!(
                f,
                "CPU {cpu} is not usable here: {why}; usable CPUs: {usable} (pick one of them, or \
                 last)"
            ),
            PlacementError::OneCpu { usable } => write!(
                f,
                "this machine has one usable CPU ({usable}): pinning the emulator would leave no \
                 CPU for the endpoints and the receive processing; drop {emulator_cpu}"
            ),
            PlacementError::Read(e) => write!(f, "reading this machine's CPUs: {e}"),
        }
    }
}

/// A checked placement on this machine's CPUs: what [`crate::LivePath`] applies and what
/// reports record (`placement` in `lab-report.json`, each round's in `results.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// The CPU the emulator's thread(s) are pinned to.
    pub emulator_cpu: usize,
    /// The CPUs that do both namespaces' receive processing (`rps_cpus` of the TUN devices);
    /// empty: not steered, the emulator's TUN writes do it.
    pub receive_cpus: Vec<usize>,
    /// The CPUs the endpoints may run on; empty: any (the scheduler's choice).
    pub endpoint_cpus: Vec<usize>,
    /// The CPUs usable when it was resolved (online and allowed to this process).
    pub usable_cpus: Vec<usize>,
}

impl Placement {
    /// One line for banners and reports: `emulator on CPU 1, receive processing on CPU 0,
    /// endpoints anywhere`.
    pub fn describe(&self) -> String {
        let on = |cpus: &[usize], none: &str| {
            if cpus.is_empty() { none.to_owned() } else { format!("on CPU {}", cpu_list(cpus)) }
        };
        format!(
            "emulator on CPU {}, receive processing {}, endpoints {}",
            self.emulator_cpu,
            on(&self.receive_cpus, "in the emulator's writes"),
            on(&self.endpoint_cpus, "anywhere")
        )
    }
}

impl Placement {
    /// Confines the calling thread, and every thread it starts from now on, to
    /// [`Placement::endpoint_cpus`] (nothing when empty) until the guard drops, which gives the
    /// thread its previous CPU set back. For endpoints that are threads of this process (an
    /// experiment's flows): start them while the guard lives.
    pub fn confine_current_thread(&self) -> std::io::Result<ThreadConfinement> {
        let previous = rustix::thread::sched_getaffinity(None).map_err(std::io::Error::from)?;
        if self.endpoint_cpus.is_empty() {
            return Ok(ThreadConfinement { previous: None });
        }
        let set = tcptail_netns::sys::cpu_set(&self.endpoint_cpus);
        rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)?;
        Ok(ThreadConfinement { previous: Some(previous) })
    }
}

/// A thread confined by [`Placement::confine_current_thread`]; dropping it restores the
/// thread's previous CPU set.
#[derive(Debug)]
#[must_use = "the confinement ends when this drops"]
pub struct ThreadConfinement {
    previous: Option<rustix::thread::CpuSet>,
}

impl Drop for ThreadConfinement {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            // Best effort: the set was this thread's a moment ago.
            let _ = rustix::thread::sched_setaffinity(None, &previous);
        }
    }
}

impl PlacementRequest {
    /// Whether anything was asked.
    pub fn is_empty(&self) -> bool {
        *self == PlacementRequest::default()
    }

    /// The first option asked for, in the order `emulator_cpu`, `steer`, `endpoints_apart`
    /// (the one an error about the whole request names); `None` when nothing was asked.
    pub fn first_asked(&self) -> Option<PlacementOption> {
        if self.emulator_cpu.is_some() {
            Some(PlacementOption::EmulatorCpu)
        } else if self.steer {
            Some(PlacementOption::Steer)
        } else if self.endpoints_apart {
            Some(PlacementOption::EndpointsApart)
        } else {
            None
        }
    }

    /// Checks what the options need of each other (steering and keeping the endpoints apart
    /// need an emulator CPU), without reading the machine.
    pub fn check(&self) -> Result<(), PlacementError> {
        match self.first_asked() {
            Some(option) if self.emulator_cpu.is_none() => {
                Err(PlacementError::NeedsEmulatorCpu { option })
            }
            _ => Ok(()),
        }
    }

    /// Checks the request against the CPUs usable here (online and in this process's CPU
    /// set) and names them; `None` when nothing was asked.
    pub fn resolve(&self) -> Result<Option<Placement>, PlacementError> {
        if self.is_empty() {
            return Ok(None);
        }
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .map_err(|e| PlacementError::Read(format!("/sys/devices/system/cpu/online: {e}")))
            .and_then(|t| {
                parse_cpu_list(&t).ok_or_else(|| {
                    PlacementError::Read(format!(
                        "/sys/devices/system/cpu/online: '{}' is not a CPU list",
                        t.trim()
                    ))
                })
            })?;
        let set = rustix::thread::sched_getaffinity(None)
            .map_err(|e| PlacementError::Read(format!("sched_getaffinity: {e}")))?;
        let allowed: Vec<usize> =
            (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect();
        let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible")
            .ok()
            .and_then(|t| parse_cpu_list(&t));
        self.resolve_on(&online, &allowed, possible.as_deref())
    }

    /// [`PlacementRequest::resolve`] on given CPU sets (for tests): `possible` (the CPUs that
    /// exist, if known) only sharpens the error text.
    pub fn resolve_on(
        &self,
        online: &[usize],
        allowed: &[usize],
        possible: Option<&[usize]>,
    ) -> Result<Option<Placement>, PlacementError> {
        self.check()?;
        let Some(choice) = self.emulator_cpu else {
            return Ok(None);
        };
        let usable: Vec<usize> = online.iter().copied().filter(|c| allowed.contains(c)).collect();
        if usable.len() < 2 {
            return Err(PlacementError::OneCpu { usable: cpu_list(&usable) });
        }
        let cpu = match choice {
            CpuChoice::Last => *usable.last().unwrap_or(&0),
            CpuChoice::Index(c) => c,
        };
        if !usable.contains(&cpu) {
            let why = if possible.is_some_and(|p| !p.contains(&cpu)) {
                "no such CPU"
            } else if !online.contains(&cpu) {
                "offline"
            } else {
                "not in this process's CPU set (taskset/cpuset)"
            };
            return Err(PlacementError::Unusable { cpu, why, usable: cpu_list(&usable) });
        }
        let others: Vec<usize> = usable.iter().copied().filter(|&c| c != cpu).collect();
        Ok(Some(Placement {
            emulator_cpu: cpu,
            receive_cpus: if self.steer { others.clone() } else { Vec::new() },
            endpoint_cpus: if self.endpoints_apart { others } else { Vec::new() },
            usable_cpus: usable,
        }))
    }
}

/// The kernel's CPU list syntax (`0-3,8,10-11`), as in `/sys/devices/system/cpu/online`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Some(cpus);
    }
    for part in text.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse::<usize>().ok()?, b.trim().parse::<usize>().ok()?);
                if a > b || b - a > 1 << 16 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// `cpus` in the kernel's list syntax (`[0, 1, 2, 5]` -> `0-2,5`); `none` when empty.
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j > i { format!("{}-{}", cpus[i], cpus[j]) } else { cpus[i].to_string() });
        i = j + 1;
    }
    if parts.is_empty() { "none".to_owned() } else { parts.join(",") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(cpu: Option<CpuChoice>, steer: bool, apart: bool) -> PlacementRequest {
        PlacementRequest { emulator_cpu: cpu, steer, endpoints_apart: apart }
    }

    #[test]
    fn cpu_choices_parse() {
        assert_eq!("1".parse::<CpuChoice>(), Ok(CpuChoice::Index(1)));
        assert_eq!(" last ".parse::<CpuChoice>(), Ok(CpuChoice::Last));
        let e = "first".parse::<CpuChoice>().unwrap_err().to_string();
        assert!(e.contains("'first'") && e.contains("last"), "{e}");
        assert!("-1".parse::<CpuChoice>().is_err());
        assert_eq!(CpuChoice::Last.to_string(), "last");
    }

    #[test]
    fn resolves_last_and_the_others() {
        let all = [0, 1, 2, 3];
        let p = req(Some(CpuChoice::Last), true, true).resolve_on(&all, &all, None).unwrap();
        let p = p.expect("asked");
        assert_eq!((p.emulator_cpu, p.receive_cpus.clone()), (3, vec![0, 1, 2]));
        assert_eq!(p.endpoint_cpus, vec![0, 1, 2]);
        assert_eq!(
            p.describe(),
            "emulator on CPU 3, receive processing on CPU 0-2, endpoints on CPU 0-2"
        );
        let p = req(Some(CpuChoice::Index(0)), false, false).resolve_on(&all, &[0, 2], None);
        let p = p.unwrap().unwrap();
        assert_eq!((p.receive_cpus.len(), p.endpoint_cpus.len()), (0, 0));
        assert_eq!(p.usable_cpus, vec![0, 2]);
        assert!(p.describe().ends_with("in the emulator's writes, endpoints anywhere"));
        assert_eq!(req(None, false, false).resolve_on(&all, &all, None), Ok(None));
    }

    #[test]
    fn refusals_name_the_problem() {
        let two = [0, 1];
        let e = req(None, true, false).resolve_on(&two, &two, None).unwrap_err();
        assert_eq!(e.option().key(), "steer");
        assert!(e.to_string().contains("--emulator-cpu"), "{e}");
        let e = req(None, false, true).resolve_on(&two, &two, None).unwrap_err();
        assert_eq!(e.option().key(), "endpoints_apart");
        let at = |cpu| req(Some(CpuChoice::Index(cpu)), true, false);
        let e = at(7).resolve_on(&two, &two, Some(&two)).unwrap_err().to_string();
        assert!(e.contains("CPU 7") && e.contains("no such CPU") && e.contains("0-1"), "{e}");
        let e = at(2).resolve_on(&[0, 1], &[0, 1, 2], Some(&[0, 1, 2])).unwrap_err();
        assert!(e.to_string().contains("offline"), "{e}");
        let e = at(2).resolve_on(&[0, 1, 2], &[0, 1], None).unwrap_err();
        assert!(e.to_string().contains("CPU set"), "{e}");
        let e = at(0).resolve_on(&[0], &[0], None).unwrap_err();
        assert!(matches!(e, PlacementError::OneCpu { .. }), "{e}");
        assert!(e.to_string().contains("one usable CPU (0)"), "{e}");
        let e = req(Some(CpuChoice::Last), false, false).resolve_on(&[0, 1], &[1], None);
        assert!(matches!(e, Err(PlacementError::OneCpu { .. })), "{e:?}");
    }

    #[test]
    fn refusals_name_the_option_as_each_front_end_spells_it() {
        let two = [0, 1];
        let e = req(None, false, true).resolve_on(&two, &two, None).unwrap_err();
        assert_eq!(e.option(), PlacementOption::EndpointsApart);
        assert_eq!((e.option().flag(), e.option().key()), ("--endpoints-apart", "endpoints_apart"));
        assert_eq!(
            e.to_string(),
            "needs --emulator-cpu N|last: it moves work to the CPUs other than the emulator's"
        );
        assert_eq!(
            e.spelled(Spelling::Key).to_string(),
            "needs emulator_cpu = N or \"last\": it moves work to the CPUs other than the \
             emulator's"
        );
        let e = req(Some(CpuChoice::Index(0)), false, false).resolve_on(&[0], &[0], None);
        let e = e.unwrap_err();
        assert_eq!(e.option(), PlacementOption::EmulatorCpu);
        assert!(e.to_string().ends_with("; drop --emulator-cpu"), "{e}");
        let keyed = e.spelled(Spelling::Key).to_string();
        assert!(keyed.ends_with("; drop emulator_cpu"), "{keyed}");
        assert_eq!(keyed.replace("emulator_cpu", "--emulator-cpu"), e.to_string());
        assert_eq!(req(None, false, false).first_asked(), None);
        assert_eq!(req(None, true, true).first_asked(), Some(PlacementOption::Steer));
        assert!(req(Some(CpuChoice::Last), true, true).check().is_ok());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
        assert_eq!(cpu_list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(cpu_list(&[]), "none");
    }

    proptest! {
        #[test]
        fn cpu_list_round_trips(mut cpus in proptest::collection::vec(0usize..300, 0..40)) {
            cpus.sort_unstable();
            cpus.dedup();
            let text = cpu_list(&cpus);
            let back = if cpus.is_empty() { Some(vec![]) } else { parse_cpu_list(&text) };
            prop_assert_eq!(back, Some(cpus));
        }
    }
}
