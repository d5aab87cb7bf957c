//! One `tcptail tune --apply`/`--revert` at a time per configuration root.
//!
//! [`TuneLock`] holds an exclusive `flock(2)` on `run/tcptail/tune.lock` under the root and
//! records its pid in the file. A second tune finds the lock held and gets [`Error::Locked`]
//! naming that pid. The kernel drops the lock when its holder dies (even by SIGKILL), so a
//! lock file left by a dead process is simply taken over ([`TuneLock::taken_over`] names the
//! pid it recorded). The holder removes the file when it is done: a waiter that opened the old
//! file notices, once it gets the lock, that the path no longer names it, and starts again.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, Mode, OFlags};

use crate::Error;

/// The lock file under a configuration root.
pub fn lock_path(config_root: &Path) -> PathBuf {
    config_root.join("run/tcptail/tune.lock")
}

/// A held tune lock; released (and its file removed) on drop.
#[derive(Debug)]
pub struct TuneLock {
    /// Holds the lock: it lives as long as this descriptor.
    _file: File,
    path: PathBuf,
    taken_over: Option<u32>,
}

impl TuneLock {
    /// Takes the lock under `config_root`, or says who holds it.
    pub fn acquire(config_root: &Path) -> Result<TuneLock, Error> {
        let path = lock_path(config_root);
        let err = |source| Error::Write { path: path.clone(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        // Retries only when the file was removed or replaced between our open and our lock.
        for _ in 0..16 {
            let fd = rustix::fs::open(
                &path,
                OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map_err(|e| err(e.into()))?;
            let mut file = File::from(fd);
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                    return Err(Error::Locked { pid: recorded_pid(&mut file), path });
                }
                Err(e) => return Err(err(e.into())),
            }
            let ours = file.metadata().map_err(err)?;
            match std::fs::symlink_metadata(&path) {
                Ok(now) if now.dev() == ours.dev() && now.ino() == ours.ino() => {}
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(err(e)),
            }
            let taken_over = recorded_pid(&mut file).filter(|p| *p != std::process::id());
            file.set_len(0).map_err(err)?;
            file.rewind().map_err(err)?;
            writeln!(file, "{}", std::process::id()).map_err(err)?;
            return Ok(TuneLock { _file: file, path, taken_over });
        }
        Err(err(std::io::Error::other("the lock file keeps being replaced")))
    }

    /// The pid a dead holder had recorded in the lock file, when this lock took it over.
    pub fn taken_over(&self) -> Option<u32> {
        self.taken_over
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TuneLock {
    fn drop(&mut self) {
        // Removed while still locked; the lock itself goes with the descriptor, closed after.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn recorded_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let dir = tempfile::tempdir().unwrap();
        let lock = TuneLock::acquire(dir.path()).unwrap();
        assert_eq!(lock.taken_over(), None);
        let recorded = std::fs::read_to_string(lock_path(dir.path())).unwrap();
        assert_eq!(recorded, format!("{}\n", std::process::id()));
        // flock conflicts between two open files, even in one process.
        let err = TuneLock::acquire(dir.path()).unwrap_err();
        let Error::Locked { pid, path } = &err else { panic!("{err:?}") };
        assert_eq!(*pid, Some(std::process::id()));
        assert_eq!(path, &lock_path(dir.path()));
        assert!(
            err.to_string().starts_with(&format!(
                "another tcptail tune is running (pid {} holds ",
                std::process::id()
            )),
            "{err}"
        );
        drop(lock);
        assert!(!lock_path(dir.path()).exists(), "released and removed");
        drop(TuneLock::acquire(dir.path()).unwrap());
    }

    #[test]
    fn a_dead_holders_lock_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let path = lock_path(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("{dead}\n")).unwrap();
        let lock = TuneLock::acquire(dir.path()).unwrap();
        assert_eq!(lock.taken_over(), Some(dead));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{}\n", std::process::id()));
    }
}
