//! The fuzz targets' checked-in inputs, replayed in the ordinary `cargo test` through the same
//! checks `cargo fuzz` runs (each crate's `fuzzing` module, which the targets in
//! `fuzz/fuzz_targets` call and nothing else):
//!
//! - `fuzz/seeds/<target>/`: the seed corpus `scripts/fuzz` starts each target from;
//! - `fuzz/regressions/<target>/`: every input a fuzzer ever crashed on, kept after the fix so
//!   the bug cannot come back unnoticed (`scripts/fuzz` says how to add one).
//!
//! A target without a row here, or without seeds, fails the test, so a new target cannot be
//! left out of either.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// A fuzz target's check: the bytes in, a panic when a property fails.
type Check = fn(&[u8]);

/// Every fuzz target and the check it runs.
const TARGETS: &[(&str, Check)] = &[
    ("units", tcptail_units::fuzzing::parsers),
    ("tcp_info", tcptail_sock::fuzzing::tcp_info),
    ("profile_toml", tcptail_sock::fuzzing::profile_toml),
    ("wire_header", tcptail_bench::fuzzing::wire_header),
    ("mahimahi_trace", tcptail_emu::fuzzing::mahimahi_trace),
    ("sock_diag", tcptail_diag::fuzzing::sock_diag),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of `dir`, sorted; none when it does not exist.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> =
        entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

#[test]
fn every_target_is_replayed_and_has_seeds() {
    let mut on_disk: Vec<String> = inputs(&fuzz_dir().join("fuzz_targets"))
        .iter()
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = TARGETS.iter().map(|(name, _)| name.to_string()).collect();
    listed.sort();
    assert_eq!(listed, on_disk, "TARGETS here must list every fuzz/fuzz_targets/*.rs");
    for (name, _) in TARGETS {
        let seeds = inputs(&fuzz_dir().join("seeds").join(name));
        assert!(!seeds.is_empty(), "fuzz/seeds/{name}/ has no seed inputs");
    }
}

#[test]
fn seeds_and_regressions_pass_the_fuzz_checks() {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for (name, check) in TARGETS {
        for kind in ["seeds", "regressions"] {
            for file in inputs(&fuzz_dir().join(kind).join(name)) {
                let data = std::fs::read(&file).unwrap();
                replayed += 1;
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check(&data))) {
                    let why = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    failures.push(format!("{}: {why}", file.display()));
                }
            }
        }
    }
    assert!(replayed > TARGETS.len(), "only {replayed} inputs found under {:?}", fuzz_dir());
    assert!(
        failures.is_empty(),
        "fuzz inputs that fail their target's checks:\n{}",
        failures.join("\n")
    );
}
