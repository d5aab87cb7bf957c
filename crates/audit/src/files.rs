//! Files tune writes that must survive a crash or a power cut: the saved previous values (the
//! only record of them) and the `sysctl.d` file.
//!
//! [`write_durably`] writes a temporary file in the same directory (created exclusively, never
//! through a symlink), fsyncs it, renames it over the target and fsyncs the directory
//! ([`tcptail_report::files::write_atomically`]), so after
//! it returns the new content is on disk under the final name, and a crash at any point leaves
//! either the old file or the new one, never half of one. [`remove_durably`] removes a file and
//! fsyncs its directory. Both first remove the temporary files a killed writer left beside the
//! target (callers hold the tune lock).

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use tcptail_report::files::{parent, sync_dir, write_atomically};

use crate::Error;

/// Writes `text` to `path` durably: temp file, fsync, rename, fsync of the directory
/// ([`tcptail_report::files::write_atomically`], the one implementation of that). Creates the
/// directory (mode 0755) when missing and first removes a killed writer's temporary files.
/// The file gets `mode`.
pub fn write_durably(path: &Path, text: &str, mode: u32) -> Result<(), Error> {
    let err = |source| Error::Write { path: path.to_owned(), source };
    fs::create_dir_all(parent(path)).map_err(err)?;
    remove_temps(path).map_err(err)?;
    write_atomically(path, text.as_bytes(), mode).map_err(err)
}

/// Removes `path` (absent is fine) and fsyncs its directory.
pub fn remove_durably(path: &Path) -> Result<(), Error> {
    let err = |source| Error::Write { path: path.to_owned(), source };
    remove_temps(path).map_err(err)?;
    match fs::remove_file(path) {
        Ok(()) => sync_dir(parent(path)).map_err(err),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// Removes the temporary files of `path` that a killed writer left (`.NAME.tmp*`); the
/// caller holds the tune lock, so no other writer is using one.
fn remove_temps(path: &Path) -> std::io::Result<()> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return Ok(()) };
    let prefix = format!(".{name}.tmp");
    let entries = match fs::read_dir(parent(path)) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) {
            match fs::remove_file(entry.path()) {
                Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_atomically_with_the_mode_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.conf");
        write_durably(&p, "one", 0o644).unwrap();
        write_durably(&p, "two", 0o600).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "two");
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_dir(dir.path().join("a")).unwrap().count(), 1, "no temp file left");
        remove_durably(&p).unwrap();
        remove_durably(&p).unwrap();
        assert!(!p.exists());
    }

    #[test]
    fn a_killed_writers_temp_files_go_with_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tune-x.json");
        fs::write(dir.path().join(".tune-x.json.tmp999999"), "half").unwrap();
        fs::write(dir.path().join(".other.json.tmp999999"), "not ours").unwrap();
        write_durably(&p, "whole", 0o644).unwrap();
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [".other.json.tmp999999", "tune-x.json"]);
    }

    #[test]
    fn never_writes_through_a_planted_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let p = dir.path().join("state.json");
        let tmp = dir.path().join(format!(".state.json.tmp{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        write_durably(&p, "new", 0o644).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
    }
}
