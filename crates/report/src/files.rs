//! Output files and directories that are safe to create as root in places other users can
//! write to (`/tmp`), and files that are never seen half-written.
//!
//! tcptail runs as root and writes reports, logs and state. A predictable name in a shared
//! directory lets another user plant a symlink there first and have root write through it, or
//! pre-create the directory and read what is written into it. So:
//!
//! - [`create_private_dir`] makes a new directory with a random name (`mkdtemp`-style) and mode
//!   0700: nobody else can have created it, and nobody else can look inside.
//! - [`prepare_out_dir`] accepts a directory the user named only if it does not exist yet
//!   (then it is created, 0700), or is a real directory (not a symlink) owned by the caller and
//!   empty (or `force`). Each refusal is an [`OutDirError`] that names the directory and the
//!   way out.
//! - [`create_new`] opens a file with `O_CREAT | O_EXCL | O_NOFOLLOW`: it never follows a
//!   symlink and never reuses a file somebody else created.
//! - [`create_replacing`] is [`create_new`] after unlinking an earlier run's file (or a
//!   symlink, which is removed, never followed): what `--force` into a used directory means.
//! - [`write_atomically`] writes a temporary file beside the target (created the same way),
//!   fsyncs it, renames it over the target and fsyncs the directory: a crash leaves the old
//!   content or the new one, never half of one, and never a file written through a symlink.
//!
//! This is the one implementation of these rules: results, lab reports and tune's state all
//! go through it.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// `O_NOFOLLOW` for [`OpenOptionsExt::custom_flags`].
fn nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Creates `path` exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`) with `mode`, for writing. Fails
/// with `AlreadyExists` if anything, a symlink included, is already there.
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new().write(true).create_new(true).mode(mode).custom_flags(nofollow()).open(path)
}

/// Like [`create_new`], after removing a file or symlink already at `path` (never following
/// it): for a directory [`prepare_out_dir`] accepted with `force`, where a previous run's
/// files are meant to be replaced. A directory at `path` is not removed: the create then
/// fails with `AlreadyExists`. Whatever appears between the removal and the create is never
/// written through: the create is still exclusive.
pub fn create_replacing(path: &Path, mode: u32) -> io::Result<File> {
    match fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_dir() => fs::remove_file(path)?,
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    create_new(path, mode)
}

/// Writes `bytes` to `path` through a temporary file in the same directory: created with
/// [`create_new`] and `mode`, fsynced, renamed over `path`, then the directory fsynced. On
/// error the temporary file is removed and `path` is untouched.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = parent(path);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp{}-{n}", std::process::id()));
    let result = (|| {
        let mut f = create_new(&tmp, mode)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The directory a file lives in (`.` for a bare name).
pub fn parent(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// fsync of a directory: makes a rename or removal in it durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates a new directory `<parent>/<prefix><10 random characters>` with mode 0700 and
/// returns its path. Retries on the (unlikely) name collision; never reuses an existing entry.
pub fn create_private_dir(parent: &Path, prefix: &str) -> io::Result<PathBuf> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut random = [0u8; 10];
    let mut urandom = File::open("/dev/urandom")?;
    for _ in 0..100 {
        urandom.read_exact(&mut random)?;
        let suffix: String =
            random.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect();
        let path = parent.join(format!("{prefix}{suffix}"));
        match DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(io::ErrorKind::AlreadyExists, "no free random directory name in 100 tries"))
}

/// Where a private default output directory goes: `$XDG_RUNTIME_DIR` when it is set to an
/// absolute path of a directory owned by the caller, else the temporary directory.
pub fn runtime_or_temp_dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .filter(|d| fs::symlink_metadata(d).is_ok_and(|m| m.is_dir() && m.uid() == caller_uid()))
        .unwrap_or_else(std::env::temp_dir)
}

fn caller_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Why an output directory the user named is refused.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    /// Something other than a directory is there (a symlink counts: it is not followed).
    #[error(
        "{path}: exists and is not a directory{}; name a new or empty directory",
        if *.symlink { " (it is a symbolic link, which is not followed)" } else { "" }
    )]
    NotADirectory {
        /// The path.
        path: String,
        /// Whether it is a symlink.
        symlink: bool,
    },
    /// The directory belongs to another user, who could read or replace what is written.
    #[error(
        "{path}: owned by uid {owner}, not by the caller (uid {caller}); name a directory you \
         own"
    )]
    NotOwned {
        /// The path.
        path: String,
        /// Its owner.
        owner: u32,
        /// The caller's effective uid.
        caller: u32,
    },
    /// The directory has files in it, which a run could overwrite or mix with its own.
    #[error(
        "{path}: not empty ({entries} {}); name an empty directory, or add --force",
        if *.entries == 1 { "entry" } else { "entries" }
    )]
    NotEmpty {
        /// The path.
        path: String,
        /// How many entries it has.
        entries: usize,
    },
    /// Creating or inspecting it failed.
    #[error("{path}: cannot {what}: {source}")]
    Io {
        /// The path.
        path: String,
        /// What was being done.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// Makes `path` ready to receive a run's files; see the [module docs](self). A missing
/// directory is created with mode 0700 (its missing parents with the default mode). An
/// existing one must be a directory, not a symlink, owned by the caller, and empty unless
/// `force`.
pub fn prepare_out_dir(path: &Path, force: bool) -> Result<(), OutDirError> {
    let io_err =
        |what| move |source| OutDirError::Io { path: path.display().to_string(), what, source };
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(parent(path)).map_err(io_err("create its parent directory"))?;
            return match DirBuilder::new().mode(0o700).create(path) {
                Ok(()) => Ok(()),
                // Appeared since we looked: judge what is there now.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => check_existing(path, force),
                Err(e) => Err(io_err("create the directory")(e)),
            };
        }
        Err(e) => return Err(io_err("inspect")(e)),
        Ok(_) => {}
    }
    check_existing(path, force)
}

fn check_existing(path: &Path, force: bool) -> Result<(), OutDirError> {
    let shown = path.display().to_string();
    let meta = fs::symlink_metadata(path).map_err(|source| OutDirError::Io {
        path: shown.clone(),
        what: "inspect",
        source,
    })?;
    if !meta.is_dir() {
        return Err(OutDirError::NotADirectory { path: shown, symlink: meta.is_symlink() });
    }
    let caller = caller_uid();
    if meta.uid() != caller {
        return Err(OutDirError::NotOwned { path: shown, owner: meta.uid(), caller });
    }
    if !force {
        let entries = fs::read_dir(path)
            .map_err(|source| OutDirError::Io { path: shown.clone(), what: "list", source })?
            .count();
        if entries > 0 {
            return Err(OutDirError::NotEmpty { path: shown, entries });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_dirs_are_new_random_and_0700() {
        let base = tempfile::tempdir().unwrap();
        let a = create_private_dir(base.path(), "tcptail-lab-").unwrap();
        let b = create_private_dir(base.path(), "tcptail-lab-").unwrap();
        assert_ne!(a, b);
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("tcptail-lab-") && name.len() == "tcptail-lab-".len() + 10);
        let meta = fs::symlink_metadata(&a).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    }

    #[test]
    fn create_new_never_follows_or_reuses() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        fs::write(&target, "precious").unwrap();
        let link = dir.path().join("report.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = create_new(&link, 0o644).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious");
        let plain = dir.path().join("plain");
        fs::write(&plain, "old").unwrap();
        assert_eq!(create_new(&plain, 0o644).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        create_new(&dir.path().join("fresh"), 0o644).unwrap().write_all(b"x").unwrap();
    }

    #[test]
    fn atomic_writes_replace_a_symlink_instead_of_writing_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        fs::write(&target, "precious").unwrap();
        let path = dir.path().join("results.json");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        write_atomically(&path, b"new", 0o600).unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "precious");
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_file(), "the link itself was replaced");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        write_atomically(&path, b"newer", 0o644).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "newer");
        let names: Vec<_> =
            fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
    }

    #[test]
    fn replacing_removes_a_file_or_a_symlink_and_never_writes_through_it() {
        let base = tempfile::tempdir().unwrap();
        let log = base.path().join("up.log");
        fs::write(&log, "an earlier run").unwrap();
        create_replacing(&log, 0o644).unwrap().write_all(b"new").unwrap();
        assert_eq!(fs::read_to_string(&log).unwrap(), "new");
        // A planted symlink is removed; its target is untouched.
        let target = base.path().join("target");
        fs::write(&target, "secret").unwrap();
        fs::remove_file(&log).unwrap();
        std::os::unix::fs::symlink(&target, &log).unwrap();
        create_replacing(&log, 0o644).unwrap().write_all(b"log").unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "secret");
        assert!(!fs::symlink_metadata(&log).unwrap().is_symlink());
        // A directory in the way is not removed.
        let dir = base.path().join("down.log");
        fs::create_dir(&dir).unwrap();
        assert_eq!(create_replacing(&dir, 0o644).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        assert!(dir.is_dir());
    }

    #[test]
    fn out_dirs_are_created_private_or_checked() {
        let base = tempfile::tempdir().unwrap();
        let new = base.path().join("a/b/out");
        prepare_out_dir(&new, false).unwrap();
        assert_eq!(fs::metadata(&new).unwrap().permissions().mode() & 0o777, 0o700);
        // Empty and ours: accepted again.
        prepare_out_dir(&new, false).unwrap();
        fs::write(new.join("old-report.json"), "{}").unwrap();
        let e = prepare_out_dir(&new, false).unwrap_err().to_string();
        assert!(e.contains("not empty (1 entry)") && e.contains("--force"), "{e}");
        prepare_out_dir(&new, true).unwrap();

        let file = base.path().join("file");
        fs::write(&file, "").unwrap();
        let e = prepare_out_dir(&file, true).unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&new, &link).unwrap();
        let e = prepare_out_dir(&link, true).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
    }

    #[test]
    fn an_out_dir_owned_by_someone_else_is_refused() {
        if caller_uid() != 0 {
            // Handing a directory to another user needs root; CI runs as root.
            panic!("this test needs root to chown a directory to another user");
        }
        let base = tempfile::tempdir().unwrap();
        let theirs = base.path().join("theirs");
        fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let e = prepare_out_dir(&theirs, true).unwrap_err().to_string();
        assert!(e.contains("owned by uid 65534") && e.contains("uid 0"), "{e}");
    }
}
