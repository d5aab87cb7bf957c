//! [`HostView`]: every read of the host, relative to a root directory (`/` for the real host, a
//! fixture tree in tests). The snapshot ([`crate::host`]), the congestion-control facts
//! ([`crate::cc`]), tune and revert all read through it; it uses none of them.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::profile::normalize;

/// Every read of the host, relative to a root directory.
#[derive(Debug, Clone)]
pub struct HostView {
    root: PathBuf,
    live: bool,
}

impl HostView {
    /// The real host (`/`), allowed to run `tc` and `ethtool`.
    pub fn live() -> Self {
        HostView { root: PathBuf::from("/"), live: true }
    }

    /// A fixture tree: files only, no commands.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        HostView { root: root.into(), live: false }
    }

    /// Whether this is the real host, where commands run (a fixture tree reads their output
    /// from files).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `root/rel`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    /// `root/proc/sys/<key with dots as slashes>`.
    pub fn sysctl_path(&self, key: &str) -> PathBuf {
        self.path(&format!("proc/sys/{}", key.replace('.', "/")))
    }

    /// A file's text, `None` when it cannot be read.
    pub fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.path(rel)).ok()
    }

    /// A sysctl's whitespace-normalised value, `None` when the key does not exist here.
    pub fn sysctl(&self, key: &str) -> Option<String> {
        std::fs::read_to_string(self.sysctl_path(key)).ok().map(|v| normalize(&v))
    }

    /// Names in a directory (sorted), empty when it cannot be read.
    pub fn list(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.path(rel))
            .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Whether this is a child network namespace: `proc/sys/net/core` exists but
    /// `net.core.default_qdisc`, which only the initial namespace has, does not.
    pub fn child_netns(&self) -> bool {
        self.path("proc/sys/net/core").is_dir()
            && !self.sysctl_path("net.core.default_qdisc").exists()
    }

    /// A test hook of a fixture tree: the text of `<root>/.hooks/<name>`. Always `None` for
    /// the live host and for any view of `/`, so no file on a real host can steer tcptail.
    pub fn fixture_hook(&self, name: &str) -> Option<String> {
        if self.live || self.root == Path::new("/") {
            return None;
        }
        self.read(&format!(".hooks/{name}")).map(|t| t.trim().to_owned())
    }

    /// A command's standard output on the live host (`None` when it fails); a fixture tree
    /// reads it from `<root>/.commands/<fixture>` instead.
    pub(crate) fn command_output(
        &self,
        fixture: &str,
        program: &str,
        args: &[&str],
    ) -> Option<String> {
        if !self.live {
            return self.read(&format!(".commands/{fixture}"));
        }
        let out = Command::new(program).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
