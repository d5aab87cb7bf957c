//! `tcptail run --profile NAME|FILE [--log] -- PROGRAM ARGS`: runs an unmodified program with
//! `libtcptail_preload.so` preloaded, so that every TCP socket it creates, connects or accepts
//! gets the profile (see the `tcptail-preload` crate for what the library does).
//!
//! Order of work: the profile is loaded and validated first (a bad profile is a usage error,
//! exit 2, and nothing runs); then the library is found (`TCPTAIL_PRELOAD_LIB`, else next to
//! this binary); then this process `exec`s the program with `LD_PRELOAD` (appended to any
//! existing value), `TCPTAIL_PROFILE` and, with `--log`, `TCPTAIL_LOG=1`. The exit code is
//! therefore the program's own; when it cannot be started, 127 (not found) or 126 (any other
//! reason), as a shell would.
//!
//! The environment variable names and the library's file name are repeated here rather than
//! taken from the preload crate on purpose: linking that crate would put its `socket`/`read`
//! hooks into this binary.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Result, bail};
use clap::Args;
use tcptail_sock::Profile;

/// Read by the preload library: the profile's built-in name or an absolute file path.
const PROFILE_ENV: &str = "TCPTAIL_PROFILE";
/// Read by the preload library: `1` logs one line per socket to stderr.
const LOG_ENV: &str = "TCPTAIL_LOG";
/// Overrides where the preload library is looked for.
const LIB_ENV: &str = "TCPTAIL_PRELOAD_LIB";
/// The preload library's file name (the `tcptail-preload` crate's cdylib).
const LIB_FILE_NAME: &str = "libtcptail_preload.so";

const RUN_AFTER_HELP: &str = "\
Applies the profile to every IPv4/IPv6 TCP socket the program creates (socket), connects or
accepts, and with quickack = \"rearm\" sets TCP_QUICKACK again after every receive on a
tracked socket (recv, recvfrom, recvmsg, recvmmsg, read, readv, and the _FORTIFY_SOURCE forms
__recv_chk, __recvfrom_chk, __read_chk). Child processes inherit it. It never changes the
program's behaviour otherwise: failed options are only logged, errno and return values are the
program's own, and UDP and Unix sockets are untouched. Options the program sets itself after
creating a socket win over the profile's.

What it cannot reach, because those programs do not call the C library's socket functions:
statically linked binaries, Go programs (raw system calls), io_uring, and anything else making
system calls directly. Receives that do not re-arm QUICKACK: preadv2, splice, stdio streams
over a socket (fdopen + fread/fgets read through glibc's internal read). For those, watch their
connections from outside with `tcptail exporter` (sock_diag) and check the host's settings
with `tcptail audit`.

The library is libtcptail_preload.so next to the tcptail binary (built by `cargo build
--workspace`, or `cargo build -p tcptail-preload`), or the file named by TCPTAIL_PRELOAD_LIB.

Exit codes: the program's own; 2 for a bad profile (nothing is run); 1 when the library is
missing; 127/126 when the program cannot be started.";

/// Run a program with a profile applied to its TCP sockets (LD_PRELOAD).
#[derive(Debug, Args)]
#[command(after_help = RUN_AFTER_HELP)]
pub struct RunArgs {
    /// Built-in profile (trading, throughput, kernel-default) or path to a profile TOML file.
    #[arg(long, value_name = "NAME|FILE")]
    profile: String,
    /// Log one line per socket to stderr with what was applied (sets TCPTAIL_LOG=1).
    #[arg(long)]
    log: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    command: Vec<OsString>,
}

/// Validates the profile, finds the library and `exec`s the program; returns only on error.
pub fn run(args: RunArgs) -> Result<ExitCode> {
    let profile_env = match profile_env_value(&args.profile) {
        Ok(value) => value,
        Err(message) => {
            eprintln!("error: --profile {}: {message}", args.profile);
            return Ok(ExitCode::from(2));
        }
    };
    let library = find_library(std::env::var_os(LIB_ENV), std::env::current_exe().ok())?;
    let preload = preload_value(std::env::var_os("LD_PRELOAD"), &library);

    let (program, rest) = args.command.split_first().expect("clap requires a program");
    let mut command = Command::new(program);
    command.args(rest).env("LD_PRELOAD", preload).env(PROFILE_ENV, profile_env);
    if args.log {
        command.env(LOG_ENV, "1");
    }
    let err = command.exec();
    eprintln!("error: cannot run {}: {err}", Path::new(program).display());
    Ok(ExitCode::from(if err.kind() == io::ErrorKind::NotFound { 127 } else { 126 }))
}

/// What the library gets in `TCPTAIL_PROFILE`: a built-in name as is, a file as an absolute
/// path (the program may change directory), after loading it to check it.
fn profile_env_value(arg: &str) -> Result<OsString, String> {
    let profile = Profile::load(arg).map_err(|e| e.to_string())?;
    profile.validate().map_err(|e| e.to_string())?;
    if Profile::builtin(arg).is_some() {
        return Ok(arg.into());
    }
    std::fs::canonicalize(arg)
        .map(PathBuf::into_os_string)
        .map_err(|e| format!("cannot resolve the profile file's path: {e}"))
}

/// The preload library: `override_path` (from `TCPTAIL_PRELOAD_LIB`) if given, else the first
/// of `DIR/libtcptail_preload.so`, `DIR/../lib/tcptail/..` and `DIR/../lib/..` that exists,
/// `DIR` being the directory of this binary.
fn find_library(override_path: Option<OsString>, exe: Option<PathBuf>) -> Result<PathBuf> {
    let path = match override_path.filter(|p| !p.is_empty()) {
        Some(p) => {
            let p = PathBuf::from(p);
            if !p.is_file() {
                bail!("{LIB_ENV}={} does not name a file", p.display());
            }
            p
        }
        None => {
            let dir = exe.as_deref().and_then(Path::parent).unwrap_or(Path::new("."));
            let candidates = [
                dir.join(LIB_FILE_NAME),
                dir.join("../lib/tcptail").join(LIB_FILE_NAME),
                dir.join("../lib").join(LIB_FILE_NAME),
            ];
            match candidates.iter().find(|c| c.is_file()) {
                Some(found) => found.clone(),
                None => bail!(
                    "cannot find {LIB_FILE_NAME} (looked in {}); it is built with the workspace: \
                     run `cargo build --workspace` (or `cargo build -p tcptail-preload`, with \
                     --release for a release tcptail), or set {LIB_ENV} to its path",
                    candidates
                        .iter()
                        .map(|c| c.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    };
    // The dynamic linker splits LD_PRELOAD at spaces and colons and wants absolute paths.
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let text = path.to_string_lossy();
    if text.contains([' ', ':']) {
        bail!(
            "the preload library's path {text:?} contains a space or ':', which LD_PRELOAD cannot hold"
        );
    }
    Ok(path)
}

/// `LD_PRELOAD` with the library appended to what was there (other preloads keep their place
/// in front).
fn preload_value(existing: Option<OsString>, library: &Path) -> OsString {
    match existing.filter(|e| !e.is_empty()) {
        Some(mut value) => {
            value.push(":");
            value.push(library);
            value
        }
        None => library.as_os_str().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_pass_through_and_bad_names_explain() {
        assert_eq!(profile_env_value("trading").unwrap(), "trading");
        let err = profile_env_value("tradng").unwrap_err();
        assert!(err.contains("unknown built-in profile `tradng`"), "{err}");
    }

    #[test]
    fn preload_is_appended() {
        let lib = Path::new("/x/libtcptail_preload.so");
        assert_eq!(preload_value(None, lib), "/x/libtcptail_preload.so");
        assert_eq!(preload_value(Some("".into()), lib), "/x/libtcptail_preload.so");
        assert_eq!(preload_value(Some("/a.so".into()), lib), "/a.so:/x/libtcptail_preload.so");
    }

    #[test]
    fn missing_library_says_how_to_build_it() {
        let exe = PathBuf::from("/nonexistent-dir/tcptail");
        let err = find_library(None, Some(exe)).unwrap_err().to_string();
        assert!(err.contains("cargo build --workspace") && err.contains(LIB_ENV), "{err}");
        let err = find_library(Some("/nonexistent.so".into()), None).unwrap_err().to_string();
        assert!(err.contains("TCPTAIL_PRELOAD_LIB=/nonexistent.so"), "{err}");
    }
}
