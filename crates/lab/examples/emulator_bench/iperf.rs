//! iperf3 inside the lab namespaces: a one-off server in the server namespace, a client in the
//! client namespace, and the receiver's goodput from the client's JSON output.

use std::io::Read as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tcptail_netns::{Group, Topology};

use crate::procfs;

const PORT: &str = "5201";

/// `SCHED_FIFO` priority of the iperf3 processes with `--endpoints-fifo`: below the
/// emulator's 10, like the delay probe's `--probe-fifo`.
const ENDPOINT_FIFO: &str = "5";

/// iperf3 as a command in one namespace: plain, or under `chrt -f` when `fifo`.
fn iperf3(topo: &Topology, server: bool, fifo: bool) -> std::process::Command {
    let program = if fifo { "chrt" } else { "iperf3" };
    let mut command =
        if server { topo.server_command(program) } else { topo.client_command(program) };
    if fifo {
        command.args(["-f", ENDPOINT_FIFO, "iperf3"]);
    }
    command
}

/// What one iperf3 flow measured.
pub struct Flow {
    /// Goodput: payload bits per second, as received (iperf3's `end.sum_received`: bytes
    /// received after the omitted seconds over the sender's test time; the receiver's last
    /// bytes, queued on the path when the sender stops, still count).
    pub bps: f64,
    /// Goodput over the receiver's own whole intervals (1 s, timed by the server, omitted
    /// and last partial intervals left out): what the receiver saw per second in steady
    /// state, free of where the test's end falls.
    pub steady_bps: f64,
    /// CPU use of the sending and the receiving iperf3 process, percent of one CPU
    /// (iperf3's `cpu_utilization_percent` `host_total` and `remote_total`).
    pub cpu_percent: (f64, f64),
    /// How the scheduler treated the sending iperf3 process; `None` when its
    /// `/proc/PID/task/*/schedstat` could not be read.
    pub sender_sched: Option<Sched>,
    /// The sending and the receiving iperf3 process, thread by thread, at their last sample
    /// (`None` when never readable).
    pub sender: Option<procfs::Process>,
    pub receiver: Option<procfs::Process>,
    /// The machine's CPU time by kind from the client's start to its exit.
    pub machine: procfs::Machine,
    /// Seconds from the client's start to its exit.
    pub wall_s: f64,
    /// Payload bytes the receiver read over the whole test, omitted seconds included (the
    /// span the CPU samples cover); NaN when its intervals are missing.
    pub received_bytes: f64,
}

/// A process's time on and waiting for a CPU (`/proc/PID/task/*/schedstat`: every thread's
/// time running and time runnable on a run queue but not running), from its start to the last
/// sample before it exited.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sched {
    /// Seconds on a CPU.
    pub run_s: f64,
    /// Seconds runnable but waiting for a CPU: what a starved process lacks.
    pub wait_s: f64,
    /// Wall-clock seconds from its start to the sample.
    pub wall_s: f64,
}

impl Sched {
    /// Share of the time it could run that it spent waiting for a CPU.
    pub fn wait_share(&self) -> f64 {
        self.wait_s / (self.run_s + self.wait_s).max(1e-9)
    }

    /// Its CPU time as a share of one CPU over its life.
    pub fn cpu_share(&self) -> f64 {
        self.run_s / self.wall_s.max(1e-9)
    }
}

/// One iperf3 TCP flow client -> server with congestion control `cc`, omitting the first
/// `omit` seconds, both iperf3 processes `SCHED_FIFO` when `fifo`: its goodput (payload bits
/// per second, as received), the endpoints' CPU use and where the machine's time went. (`cc`
/// is set per socket: a namespace can only default to the host's "allowed" algorithms, and the
/// host default may be BBR, whose PROBE_RTT costs about 2 % of goodput every 10 s.)
pub fn flow(
    topo: &mut Topology,
    secs: u32,
    omit: u32,
    cc: &str,
    fifo: bool,
) -> Result<Flow, String> {
    let mut server = iperf3(topo, true, fifo);
    server.args(["-s", "-1", "-J", "-p", PORT]).stdout(Stdio::null()).stderr(Stdio::null());
    let server_pid =
        topo.processes().spawn("iperf3-server", server, Group::Own).map_err(|e| e.to_string())?;
    wait_listening(topo)?;
    let mut client = iperf3(topo, false, fifo);
    let (secs, omit) = (secs.to_string(), omit.to_string());
    client.args(["-c", &tcptail_netns::addr::SERVER_ADDR.to_string(), "-p", PORT]);
    client.args(["-t", &secs, "-O", &omit, "-C", cc, "-J", "--get-server-output"]);
    client.stdout(Stdio::piped()).stderr(Stdio::piped());
    let machine_before = procfs::Machine::read();
    let started = Instant::now();
    let mut child = client.spawn().map_err(|e| format!("iperf3 client: {e}"))?;
    let mut sampler = procfs::Sampler::new(&[child.id(), server_pid]);
    // Its output is read on threads so that a full pipe never stalls it while it is sampled.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    loop {
        match child.try_wait().map_err(|e| format!("iperf3 client: {e}"))? {
            Some(_) => break,
            None => {
                sampler.sample();
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    let machine = machine_before.until(&procfs::Machine::read());
    let [sender, receiver]: [Option<procfs::Process>; 2] =
        sampler.into_last().try_into().expect("two processes sampled");
    let sender_sched = sender.as_ref().map(|p| {
        let t = p.total();
        Sched { run_s: t.run_s, wait_s: t.wait_s, wall_s: p.wall_s }
    });
    let out = std::process::Output {
        status: child.wait().map_err(|e| format!("iperf3 client: {e}"))?,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("iperf3 JSON: {e}: {}", String::from_utf8_lossy(&out.stderr)))?;
    if let Some(err) = json.get("error") {
        return Err(format!("iperf3: {err}"));
    }
    let bps = json["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or_else(|| "iperf3 JSON has no end.sum_received.bits_per_second".to_owned())?;
    let steady_bps = steady(&json["server_output_json"]["intervals"]);
    let received_bytes = received(&json["server_output_json"]["intervals"]);
    let cpu = &json["end"]["cpu_utilization_percent"];
    let percent = |key: &str| cpu[key].as_f64().unwrap_or(f64::NAN);
    Ok(Flow {
        bps,
        steady_bps,
        cpu_percent: (percent("host_total"), percent("remote_total")),
        sender_sched,
        sender,
        receiver,
        machine,
        wall_s,
        received_bytes,
    })
}

/// Payload bytes over all of the receiver's intervals, omitted ones included; NaN when there
/// are none.
fn received(intervals: &serde_json::Value) -> f64 {
    let Some(list) = intervals.as_array().filter(|l| !l.is_empty()) else { return f64::NAN };
    list.iter().filter_map(|i| i["sum"]["bytes"].as_f64()).sum()
}

/// Bits per second over the receiver's whole, non-omitted intervals but the last; NaN when
/// there are none.
fn steady(intervals: &serde_json::Value) -> f64 {
    let Some(list) = intervals.as_array() else { return f64::NAN };
    let whole: Vec<(f64, f64)> = list
        .iter()
        .map(|i| &i["sum"])
        .filter(|s| !s["omitted"].as_bool().unwrap_or(false))
        .filter_map(|s| Some((s["bytes"].as_f64()?, s["seconds"].as_f64()?)))
        .collect();
    let whole = &whole[..whole.len().saturating_sub(1)];
    let (bytes, secs) = whole.iter().fold((0.0, 0.0), |(b, t), (bi, ti)| (b + bi, t + ti));
    if secs > 0.0 { bytes * 8.0 / secs } else { f64::NAN }
}

fn wait_listening(topo: &Topology) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let out = topo.server().exec("ss", ["-Hltn", &format!("sport = :{PORT}")]);
        if out.is_ok_and(|s| !s.trim().is_empty()) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err("iperf3 server did not listen within 5 s".to_owned())
}
