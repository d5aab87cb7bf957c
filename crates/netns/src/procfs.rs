//! The one place procfs text about tasks and the machine is parsed: a task's `stat` line (its
//! name and CPU time), its `schedstat` (time on a CPU and waiting for one), `key: value` files
//! (`status`, `io`), the aggregate `cpu` line of `/proc/stat`, the `some` total of
//! `/proc/pressure/cpu`, a protocol's memory row of `/proc/net/protocols` and `tcp_mem`.
//!
//! Parsers only: they take the text a caller read and return `None` when it does not have the
//! documented shape (proc(5)), never panic. Reading the files, and deciding what an unreadable
//! one means, stays with the caller (`bench::context`, the lab emulator's lateness attribution,
//! the `emulator_bench` example, [`crate::tcp_memory`]).

/// `USER_HZ`: the unit of the CPU times in a task's `stat` and in `/proc/stat` (100 on every
/// Linux ABI, whatever the kernel's own `HZ`).
pub const USER_HZ: u64 = 100;

/// The fields tcptail reads from a task's `stat` (`/proc/<pid>/stat`,
/// `/proc/<pid>/task/<tid>/stat`, `/proc/thread-self/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskStat<'a> {
    /// The task's name (`comm`, field 2, without its parentheses).
    pub comm: &'a str,
    /// Its state (field 3): `R` running, `S` sleeping, `Z` zombie, ...
    pub state: char,
    /// User CPU time in [`USER_HZ`] ticks (field 14); for `/proc/<pid>/stat`, every thread's,
    /// exited ones included.
    pub utime: u64,
    /// System CPU time in [`USER_HZ`] ticks (field 15).
    pub stime: u64,
}

impl TaskStat<'_> {
    /// User plus system CPU time, in [`USER_HZ`] ticks.
    pub fn cpu_ticks(&self) -> u64 {
        self.utime.saturating_add(self.stime)
    }
}

/// Parses a task's `stat` line. The name may hold spaces and parentheses: it runs from the
/// first `(` to the last `)`, and the numbered fields are counted after it.
pub fn parse_task_stat(text: &str) -> Option<TaskStat<'_>> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?;
    // After the name: state is field 3, so utime (field 14) is the 12th and stime the 13th.
    let mut rest = text.get(close + 1..)?.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let mut rest = rest.skip(10);
    let utime = rest.next()?.parse().ok()?;
    let stime = rest.next()?.parse().ok()?;
    Some(TaskStat { comm, state, utime, stime })
}

/// A task's time on a CPU and runnable but waiting for one, in nanoseconds since it started
/// (`schedstat`; the kernel keeps it with `CONFIG_SCHED_INFO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedTimes {
    /// Time on a CPU.
    pub run_ns: u64,
    /// Time runnable on a run queue, waiting for a CPU.
    pub wait_ns: u64,
}

/// Parses a task's `schedstat`: `run_ns wait_ns timeslices`. Bytes, because the lab emulator
/// re-reads it with `pread` into a stack buffer.
pub fn parse_schedstat(text: &[u8]) -> Option<SchedTimes> {
    let text = std::str::from_utf8(text).ok()?;
    let mut fields = text.split_ascii_whitespace().map(str::parse::<u64>);
    let (Some(Ok(run_ns)), Some(Ok(wait_ns))) = (fields.next(), fields.next()) else {
        return None;
    };
    Some(SchedTimes { run_ns, wait_ns })
}

/// The number that starts `key`'s value in a `key: value` file such as a task's `status`
/// (`voluntary_ctxt_switches`, `VmHWM`: a size in kB) or `io` (`syscr`, `syscw`). `key` is
/// given without its colon.
pub fn status_field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
}

/// The machine's CPU time by kind, in [`USER_HZ`] ticks since boot: the aggregate `cpu` line of
/// `/proc/stat`. Guest time is left out: the kernel already counts it in `user` and `nice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTicks {
    /// Normal processes in user mode.
    pub user: u64,
    /// Niced processes in user mode.
    pub nice: u64,
    /// Kernel mode.
    pub system: u64,
    /// Idle.
    pub idle: u64,
    /// Idle with I/O outstanding.
    pub iowait: u64,
    /// Hard interrupts.
    pub irq: u64,
    /// Soft interrupts.
    pub softirq: u64,
    /// Stolen: the hypervisor ran something else while this vCPU was runnable.
    pub steal: u64,
}

impl CpuTicks {
    /// Every tick counted (busy, idle and stolen).
    pub fn total(&self) -> u64 {
        [self.nice, self.system, self.idle, self.iowait, self.irq, self.softirq, self.steal]
            .into_iter()
            .fold(self.user, u64::saturating_add)
    }

    /// Idle ticks, those with I/O outstanding included.
    pub fn idle_with_iowait(&self) -> u64 {
        self.idle.saturating_add(self.iowait)
    }
}

/// Parses the aggregate `cpu ` line of `/proc/stat` (the per-CPU `cpuN` lines are skipped):
/// every field a number, at least the eight up to `steal` (every kernel since 2.6.11).
pub fn parse_cpu_ticks(proc_stat: &str) -> Option<CpuTicks> {
    let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> =
        line.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal] = *fields.get(..8)? else {
        return None;
    };
    Some(CpuTicks { user, nice, system, idle, iowait, irq, softirq, steal })
}

/// The `some` line's `total=` of `/proc/pressure/cpu` (PSI): microseconds since boot in which
/// at least one runnable task waited for a CPU.
pub fn parse_cpu_pressure_us(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with("some"))?
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// A protocol's memory accounting, from its row of `/proc/net/protocols`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProtocolMemory {
    /// Pages its sockets hold (`memory`). For TCP one count for the whole host: the kernel's
    /// `tcp_memory_allocated` is not kept per network namespace.
    pub pages: u64,
    /// Whether the kernel has declared memory pressure for it (`press`): while it has, TCP
    /// stops growing every socket's buffers and shrinks receive windows, in every namespace.
    pub pressure: bool,
}

/// The `name` row (`TCP`) of `/proc/net/protocols`, its `memory` and `press` columns found by
/// the header. `None` when the text has no such row or the protocol keeps no memory account
/// (`-1` and `NI`).
pub fn parse_protocol_memory(text: &str, name: &str) -> Option<ProtocolMemory> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next()?.split_whitespace().collect();
    let column = |title: &str| header.iter().position(|h| *h == title);
    let (memory, press) = (column("memory")?, column("press")?);
    let row: Vec<&str> = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|r| r.first() == Some(&name))?;
    let pages = row.get(memory)?.parse().ok()?;
    let pressure = match *row.get(press)? {
        "yes" => true,
        "no" => false,
        _ => return None,
    };
    Some(ProtocolMemory { pages, pressure })
}

/// `net.ipv4.tcp_mem` (`/proc/sys/net/ipv4/tcp_mem`): in pages, the level below which TCP
/// leaves memory pressure, the level at which it enters it, and the hard limit.
pub fn parse_tcp_mem(text: &str) -> Option<[u64; 3]> {
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    let limits = [fields.next()?.ok()?, fields.next()?.ok()?, fields.next()?.ok()?];
    fields.next().is_none().then_some(limits)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn task_stat_names_may_hold_spaces_and_parentheses() {
        let line = "27954 (a b) c)) R 27951 27951 15937 0 -1 4194304 99 0 0 0 250 75 0 0 20 0 1 0";
        let t = parse_task_stat(line).unwrap();
        assert_eq!((t.comm, t.state), ("a b) c)", 'R'));
        assert_eq!((t.utime, t.stime), (250, 75));
        assert!(parse_task_stat("12 (x) R 1 2").is_none());
    }

    #[test]
    fn task_stat_cpu_ticks_add_user_and_system() {
        let text = "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194304 100 0 0 0 37 5 0 0 20 0 1";
        assert_eq!(parse_task_stat(text).map(|t| t.cpu_ticks()), Some(42));
        assert_eq!(parse_task_stat("garbage"), None);
        assert_eq!(parse_task_stat(") 1 2 3 4 5 6 7 8 9 10 11 12 13 ("), None);
    }

    #[test]
    fn the_own_task_stat_parses() {
        let text = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        let t = parse_task_stat(&text).expect("own stat");
        let comm = std::fs::read_to_string("/proc/self/comm").expect("/proc/self/comm");
        assert_eq!(t.comm, comm.trim_end_matches('\n'));
        let thread = std::fs::read_to_string("/proc/thread-self/stat").expect("thread-self");
        let t = parse_task_stat(&thread).expect("own thread's stat");
        assert_eq!(t.state, 'R', "the thread reading its own stat is running");
    }

    #[test]
    fn parses_schedstat_and_rejects_garbage() {
        assert_eq!(
            parse_schedstat(b"97830677 458213380 49\n"),
            Some(SchedTimes { run_ns: 97_830_677, wait_ns: 458_213_380 })
        );
        assert_eq!(parse_schedstat(b"12 34"), Some(SchedTimes { run_ns: 12, wait_ns: 34 }));
        assert_eq!(parse_schedstat(b"12\n"), None);
        assert_eq!(parse_schedstat(b"x 1 2"), None);
        assert_eq!(parse_schedstat(b""), None);
        assert_eq!(parse_schedstat(&[0xff, 0xfe]), None);
    }

    #[test]
    fn status_fields_by_key() {
        let status = "Name:\tx\nVmHWM:\t  5120 kB\nvoluntary_ctxt_switches:\t7\n\
                      nonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(status_field(status, "voluntary_ctxt_switches"), Some(7));
        assert_eq!(status_field(status, "nonvoluntary_ctxt_switches"), Some(3));
        assert_eq!(status_field(status, "VmHWM"), Some(5120));
        assert_eq!(status_field(status, "Name"), None);
        assert_eq!(status_field(status, "VmHW"), None);
        assert_eq!(status_field("syscr: 12\nsyscw: 4\n", "syscw"), Some(4));
    }

    #[test]
    fn proc_stat_cpu_line_by_kind() {
        let text = "cpu  100 5 50 1000 20 1 2 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let t = parse_cpu_ticks(text).unwrap();
        assert_eq!((t.user, t.nice, t.system, t.idle), (100, 5, 50, 1000));
        assert_eq!((t.iowait, t.irq, t.softirq, t.steal), (20, 1, 2, 7));
        assert_eq!((t.total(), t.idle_with_iowait()), (1185, 1020));
        assert!(parse_cpu_ticks("intr 1 2 3").is_none());
        assert!(parse_cpu_ticks("cpu  1 2 x").is_none());
        assert!(parse_cpu_ticks("cpu  1 2 3 4 5 6 7").is_none());
    }

    #[test]
    fn cpu_pressure_some_total() {
        let text = "some avg10=1.50 avg60=0.80 avg300=0.20 total=123456\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=99\n";
        assert_eq!(parse_cpu_pressure_us(text), Some(123_456));
        assert_eq!(parse_cpu_pressure_us("full avg10=0.00 total=99\n"), None);
    }

    #[test]
    fn protocol_memory_by_header() {
        let text = "protocol  size sockets  memory press maxhdr  slab module     cl co\n\
                    PACKET    1600      0      -1   NI       0   no   kernel      n  n\n\
                    TCPv6     2432      0  323658   no     192   yes  kernel      y  y\n\
                    TCP       2304      9  327817  yes     192   yes  kernel      y  y\n";
        let tcp = parse_protocol_memory(text, "TCP").unwrap();
        assert_eq!(tcp, ProtocolMemory { pages: 327_817, pressure: true });
        let v6 = parse_protocol_memory(text, "TCPv6").unwrap();
        assert_eq!(v6, ProtocolMemory { pages: 323_658, pressure: false });
        assert_eq!(parse_protocol_memory(text, "PACKET"), None, "no memory account");
        assert_eq!(parse_protocol_memory(text, "UDP"), None);
        assert_eq!(parse_protocol_memory("protocol size\nTCP 1\n", "TCP"), None);
    }

    #[test]
    fn the_host_protocols_have_a_tcp_row() {
        let text = std::fs::read_to_string("/proc/net/protocols").expect("/proc/net/protocols");
        assert!(parse_protocol_memory(&text, "TCP").is_some(), "{text}");
        let limits = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_mem").expect("tcp_mem");
        let [low, pressure, high] = parse_tcp_mem(&limits).expect("three numbers");
        assert!(low <= pressure && pressure <= high, "{limits}");
    }

    #[test]
    fn tcp_mem_is_three_numbers() {
        assert_eq!(parse_tcp_mem("287898\t383867\t575796\n"), Some([287_898, 383_867, 575_796]));
        assert_eq!(parse_tcp_mem("1 2"), None);
        assert_eq!(parse_tcp_mem("1 2 3 4"), None);
        assert_eq!(parse_tcp_mem("1 x 3"), None);
    }

    /// A `comm` as the kernel may write it: up to 15 bytes of anything but NUL, here printable
    /// with the awkward ones (spaces, parentheses) likely.
    fn comm() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[a-z() :/.-]{0,15}").unwrap()
    }

    /// Text that starts like one of the files and goes on with their characters, so the parsers
    /// get past their first checks.
    fn near_miss() -> impl Strategy<Value = String> {
        let start = prop_oneof![
            Just("cpu  "),
            Just("1 (a) "),
            Just("some total="),
            Just("syscr:"),
            Just("protocol memory press\nTCP ")
        ];
        (start, "[0-9 ()a-z=:\n-]{0,200}").prop_map(|(start, rest)| format!("{start}{rest}"))
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(
            text in prop_oneof![".{0,300}", near_miss()],
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let _ = parse_task_stat(&text);
            let _ = parse_cpu_ticks(&text).map(|t| (t.total(), t.idle_with_iowait()));
            let _ = parse_cpu_pressure_us(&text);
            let _ = status_field(&text, "syscr");
            let _ = parse_schedstat(text.as_bytes());
            let _ = parse_schedstat(&bytes);
            let _ = parse_protocol_memory(&text, "TCP");
            let _ = parse_tcp_mem(&text);
        }

        #[test]
        fn well_formed_task_stat_parses_exactly(
            pid in 1u32..4_194_304,
            comm in comm(),
            state in proptest::sample::select(vec!['R', 'S', 'D', 'Z', 'T', 't', 'X', 'I']),
            before in proptest::collection::vec(0u64..1 << 40, 10),
            utime in any::<u64>(),
            stime in any::<u64>(),
            after in proptest::collection::vec(0u64..1 << 40, 0..40),
        ) {
            let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
            let line = format!("{pid} ({comm}) {state} {} {utime} {stime} {}\n", join(&before), join(&after));
            let t = parse_task_stat(&line).unwrap();
            prop_assert_eq!(t, TaskStat { comm: &comm, state, utime, stime });
            prop_assert_eq!(t.cpu_ticks(), utime.saturating_add(stime));
        }

        #[test]
        fn well_formed_cpu_lines_parse_exactly(
            v in proptest::collection::vec(0u64..1 << 48, 8..=10),
            per_cpu in proptest::collection::vec(any::<u64>(), 10),
        ) {
            let join = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
            let text = format!("cpu  {}\ncpu0 {}\nintr 1 2\n", join(&v), join(&per_cpu));
            let t = parse_cpu_ticks(&text).unwrap();
            let want = CpuTicks {
                user: v[0], nice: v[1], system: v[2], idle: v[3],
                iowait: v[4], irq: v[5], softirq: v[6], steal: v[7],
            };
            prop_assert_eq!(t, want);
            prop_assert_eq!(t.total(), v[..8].iter().sum::<u64>());
        }

        #[test]
        fn well_formed_protocol_rows_parse_exactly(pages in 0u64..1 << 62, pressure in any::<bool>(), sockets in any::<u32>()) {
            let press = if pressure { "yes" } else { "no" };
            let text = format!(
                "protocol  size sockets  memory press maxhdr\nUDP 1 0 0 NI 0\nTCP 2304 {sockets} {pages} {press} 192\n"
            );
            prop_assert_eq!(parse_protocol_memory(&text, "TCP"), Some(ProtocolMemory { pages, pressure }));
        }

        #[test]
        fn well_formed_schedstat_parses_exactly(run in any::<u64>(), wait in any::<u64>(), slices in any::<u64>()) {
            let text = format!("{run} {wait} {slices}\n");
            prop_assert_eq!(parse_schedstat(text.as_bytes()), Some(SchedTimes { run_ns: run, wait_ns: wait }));
        }

        #[test]
        fn well_formed_status_fields_parse_exactly(a in any::<u64>(), b in any::<u64>()) {
            let text = format!("rchar: 1\nsyscr:\t{a}\nsyscw: {b} \n");
            prop_assert_eq!(status_field(&text, "syscr"), Some(a));
            prop_assert_eq!(status_field(&text, "syscw"), Some(b));
        }

        #[test]
        fn well_formed_cpu_pressure_parses_exactly(some in any::<u64>(), full in any::<u64>()) {
            let text = format!(
                "some avg10=0.00 avg60=0.00 avg300=0.00 total={some}\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total={full}\n"
            );
            prop_assert_eq!(parse_cpu_pressure_us(&text), Some(some));
        }
    }
}
