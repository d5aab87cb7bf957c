//! tcptail's one BPF layer (floor 0): the `bpf(2)` calls its programs need — program load
//! with the verifier's log, map create/update, link create, iterator create/read — behind a
//! safe API, and the instruction assembler ([`asm`]) the programs are written in. Users: the
//! AF_XDP engine's redirect program (`tcptail-bench`) and the BPF socket iterator
//! (`tcptail-diag`). No libbpf, no object files: programs are assembled at run time.

pub mod asm;
mod sys;

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use sys::Attr;

/// `BPF_PROG_TYPE_XDP`.
pub const PROG_TYPE_XDP: u32 = 6;
/// `BPF_PROG_TYPE_TRACING`.
pub const PROG_TYPE_TRACING: u32 = 26;
/// `BPF_PROG_TYPE_SOCKET_FILTER`.
pub const PROG_TYPE_SOCKET_FILTER: u32 = 1;
/// `BPF_MAP_TYPE_XSKMAP`.
pub const MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_MAP_TYPE_ARRAY`.
pub const MAP_TYPE_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_SK_STORAGE`.
pub const MAP_TYPE_SK_STORAGE: u32 = 24;
/// `BPF_TRACE_ITER` (attach type of an iterator program and its link).
pub const TRACE_ITER: u32 = 28;
/// `BPF_XDP` (attach type of an XDP program and its link).
pub const ATTACH_XDP: u32 = 37;

/// A program load the kernel refused, with what its verifier said.
#[derive(Debug, thiserror::Error)]
#[error("{source}{}", if log.is_empty() { String::new() } else { format!("; verifier log:\n{log}") })]
pub struct LoadError {
    /// The load's error (EPERM/EACCES: missing capabilities; EINVAL/EACCES with a log: the
    /// verifier's refusal).
    #[source]
    pub source: io::Error,
    /// The verifier's log of a second load made to learn why (empty if it had nothing).
    pub log: String,
}

/// What to load: `BPF_PROG_LOAD`'s fields tcptail uses.
#[derive(Debug, Clone, Copy)]
pub struct ProgLoad<'a> {
    /// `BPF_PROG_TYPE_*`.
    pub prog_type: u32,
    /// The instructions ([`asm::Asm::finish`]).
    pub insns: &'a [u64],
    /// The license (GPL-compatible for GPL-only helpers).
    pub license: &'a CStr,
    /// The program's name, up to 15 bytes (longer is cut).
    pub name: &'a str,
    /// `expected_attach_type` (0 when the type has none).
    pub expected_attach_type: u32,
    /// `attach_btf_id` (the BTF id of the attach target; 0 when none).
    pub attach_btf_id: u32,
}

/// Loads a program. On failure the program is loaded again with a verifier log (1 MiB, level
/// 1), so the error says why; a load interrupted by a signal is retried.
pub fn prog_load(p: &ProgLoad<'_>) -> Result<OwnedFd, LoadError> {
    let load = |log: Option<&mut Vec<u8>>| {
        let mut attr = Attr::new();
        attr.u32(0, p.prog_type)
            .u32(4, p.insns.len() as u32)
            .u64(8, p.insns.as_ptr() as u64)
            .u64(16, p.license.as_ptr() as u64)
            .u32(68, p.expected_attach_type)
            .u32(108, p.attach_btf_id);
        let name = &p.name.as_bytes()[..p.name.len().min(15)];
        attr.0[48..48 + name.len()].copy_from_slice(name);
        if let Some(log) = log {
            log.clear();
            log.resize(1 << 20, 0);
            attr.u32(24, 1).u32(28, log.len() as u32).u64(32, log.as_mut_ptr() as u64);
        }
        loop {
            match sys::bpf_fd(sys::BPF_PROG_LOAD, &mut attr) {
                // The verifier can be interrupted by a signal; the load is simply retried.
                Err(e)
                    if e.raw_os_error() == Some(libc::EAGAIN)
                        || e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    };
    match load(None) {
        Ok(fd) => Ok(fd),
        Err(source) => {
            // Load again with the verifier's log so the error can say why.
            let mut log = Vec::new();
            let again = load(Some(&mut log));
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            log.truncate(end);
            match again {
                Ok(fd) => Ok(fd),
                Err(_) => Err(LoadError {
                    source,
                    log: String::from_utf8_lossy(&log).trim_end().to_owned(),
                }),
            }
        }
    }
}

/// A BPF map and the key and value sizes it was created with.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    key_size: u32,
    value_size: u32,
}

impl Map {
    /// `BPF_MAP_CREATE` of `map_type` with `max_entries` entries.
    pub fn create(
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
    ) -> io::Result<Map> {
        let mut attr = Attr::new();
        attr.u32(0, map_type).u32(4, key_size).u32(8, value_size).u32(12, max_entries);
        let fd = sys::bpf_fd(sys::BPF_MAP_CREATE, &mut attr)?;
        Ok(Map { fd, key_size, value_size })
    }

    /// A socket-storage map (`BPF_MAP_TYPE_SK_STORAGE`) of `value_size`-byte values: each
    /// socket a program gives storage to (`bpf_sk_storage_get` with `BPF_SK_STORAGE_GET_F_CREATE`)
    /// holds one, freed with the socket; [`link_create_map_iter`] walks them. The kernel wants
    /// the key and value described in BTF: a small blob (key `int`, value `u8[value_size]`) is
    /// loaded for it.
    pub fn create_sk_storage(value_size: u32) -> io::Result<Map> {
        let btf = btf_load(&storage_btf(value_size))?;
        let mut attr = Attr::new();
        attr.u32(0, MAP_TYPE_SK_STORAGE).u32(4, 4).u32(8, value_size);
        // BPF_F_NO_PREALLOC (required), btf_fd, btf_key_type_id 1, btf_value_type_id 3.
        attr.u32(16, 1).u32(48, btf.as_raw_fd() as u32).u32(52, 1).u32(56, 3);
        let fd = sys::bpf_fd(sys::BPF_MAP_CREATE, &mut attr)?;
        Ok(Map { fd, key_size: 4, value_size })
    }

    /// The map's descriptor (for [`asm::Asm::load_map_fd`]).
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// `BPF_MAP_UPDATE_ELEM` (`BPF_ANY`): `key` and `value` must have the map's sizes.
    pub fn update(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        if key.len() != self.key_size as usize || value.len() != self.value_size as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "map update with a {}-byte key and {}-byte value; the map has {} and {}",
                    key.len(),
                    value.len(),
                    self.key_size,
                    self.value_size
                ),
            ));
        }
        let mut attr = Attr::new();
        attr.u32(0, self.fd.as_raw_fd() as u32)
            .u64(8, key.as_ptr() as u64)
            .u64(16, value.as_ptr() as u64);
        sys::bpf(sys::BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
    }
}

/// `BPF_LINK_CREATE`: attaches `prog` to `target` (an interface index for XDP, 0 for an
/// iterator) with `attach_type` and `flags`. Detached when the link is closed.
pub fn link_create(
    prog: impl AsFd,
    target: u32,
    attach_type: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.u32(0, prog.as_fd().as_raw_fd() as u32).u32(4, target).u32(8, attach_type).u32(12, flags);
    sys::bpf_fd(sys::BPF_LINK_CREATE, &mut attr)
}

/// Links a loaded map-iterator program (`iter/bpf_sk_storage_map`, ...) to the map it walks
/// (`BPF_LINK_CREATE` with `BPF_TRACE_ITER` and `bpf_iter_link_info.map.map_fd`).
pub fn link_create_map_iter(prog: impl AsFd, map: &Map) -> io::Result<OwnedFd> {
    // union bpf_iter_link_info: 16 bytes, map_fd first.
    let info = [map.raw_fd() as u32, 0, 0, 0];
    let mut attr = Attr::new();
    attr.u32(0, prog.as_fd().as_raw_fd() as u32).u32(8, TRACE_ITER);
    attr.u64(16, info.as_ptr() as u64).u32(24, std::mem::size_of_val(&info) as u32);
    sys::bpf_fd(sys::BPF_LINK_CREATE, &mut attr)
}

/// `BPF_BTF_LOAD` of a raw BTF blob; the refusal carries the kernel's log.
fn btf_load(blob: &[u8]) -> io::Result<OwnedFd> {
    let mut log = vec![0u8; 4096];
    let mut attr = Attr::new();
    attr.u64(0, blob.as_ptr() as u64).u64(8, log.as_mut_ptr() as u64);
    attr.u32(16, blob.len() as u32).u32(20, log.len() as u32).u32(24, 1);
    sys::bpf_fd(sys::BPF_BTF_LOAD, &mut attr).map_err(|e| {
        let log = String::from_utf8_lossy(&log);
        io::Error::new(e.kind(), format!("loading BTF: {e}: {}", log.trim_end_matches('\0')))
    })
}

/// The BTF of a socket-storage map's key and value: [1] `int`, [2] `u8`, [3] `u8[len]`.
fn storage_btf(value_size: u32) -> Vec<u8> {
    const KIND_INT: u32 = 1 << 24;
    const KIND_ARRAY: u32 = 3 << 24;
    const INT_SIGNED: u32 = 1 << 24;
    #[rustfmt::skip]
    let types: [u32; 14] = [
        1, KIND_INT, 4, INT_SIGNED | 32, // int (name at 1)
        5, KIND_INT, 1, 8, // u8 (name at 5)
        0, KIND_ARRAY, 0, 2, 1, value_size, // u8[value_size], indexed by int
    ];
    let strings = b"\0int\0u8\0";
    let type_len = (types.len() * 4) as u32;
    let mut blob = Vec::new();
    blob.extend_from_slice(&0xeb9f_u16.to_ne_bytes());
    blob.extend_from_slice(&[1, 0]); // version, flags
    for v in [24, 0, type_len, type_len, strings.len() as u32] {
        blob.extend_from_slice(&u32::to_ne_bytes(v)); // hdr_len, type and string sections
    }
    types.iter().for_each(|t| blob.extend_from_slice(&t.to_ne_bytes()));
    blob.extend_from_slice(strings);
    blob
}

/// Opens one iteration of an iterator link over the calling thread's network namespace
/// (`BPF_ITER_CREATE`).
pub fn iter_create(link: impl AsFd) -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.u32(0, link.as_fd().as_raw_fd() as u32);
    sys::bpf_fd(sys::BPF_ITER_CREATE, &mut attr)
}

/// [`iter_create`] from a helper thread inside the network namespace bound at `path`: an
/// iterator walks the namespace of the thread that created it.
pub fn iter_create_in_netns(link: impl AsFd + Sync, path: &Path) -> io::Result<OwnedFd> {
    sys::in_netns(path, || iter_create(&link))
}

/// Reads the next bytes of an iterator into `buf`: 0 at the end of the iteration.
pub fn read(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    sys::read(fd.as_fd(), buf)
}

#[cfg(test)]
mod tests {
    use super::asm::{Asm, R0};
    use super::*;

    fn is_root() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .map(|l| l.split_whitespace().nth(2) == Some("0"))
            })
            .unwrap_or(false)
    }

    fn trivial(ret: i32, exit: bool) -> Vec<u64> {
        let mut a = Asm::default();
        a.mov_imm(R0, ret);
        if exit {
            a.exit();
        }
        a.finish().unwrap()
    }

    /// Needs root (CI runs as root); fails, not skips, without it.
    #[test]
    fn a_trivial_program_loads_and_a_broken_one_comes_back_with_the_log() {
        assert!(is_root(), "this test loads BPF programs: run it as root");
        let ok = trivial(2, true);
        let load = |insns: &[u64]| {
            prog_load(&ProgLoad {
                prog_type: PROG_TYPE_XDP,
                insns,
                license: c"Dual MIT/GPL",
                name: "tcptail_test_trivial",
                expected_attach_type: ATTACH_XDP,
                attach_btf_id: 0,
            })
        };
        load(&ok).expect("r0 = XDP_PASS; exit loads");
        let err = load(&trivial(2, false)).expect_err("a program without exit is refused");
        assert!(!err.log.is_empty(), "the refusal carries the verifier's log: {err}");
        assert!(err.to_string().contains("verifier log"), "{err}");
    }

    #[test]
    fn a_socket_storage_map_is_created_with_its_btf() {
        assert!(is_root(), "this test creates BPF maps: run it as root");
        let map = Map::create_sk_storage(80).expect("the kernel accepts the storage's BTF");
        assert!(map.raw_fd() >= 0);
        // Socket storage has no user-space update by index: a 4-byte key is a socket fd.
        let bad = map.update(&u32::MAX.to_ne_bytes(), &[0u8; 80]).unwrap_err();
        assert_ne!(bad.kind(), io::ErrorKind::InvalidInput, "sizes accepted, the fd refused");
    }

    #[test]
    fn map_update_checks_sizes_and_stores() {
        assert!(is_root(), "this test creates BPF maps: run it as root");
        let map = Map::create(MAP_TYPE_ARRAY, 4, 8, 2).unwrap();
        map.update(&1u32.to_ne_bytes(), &7u64.to_ne_bytes()).unwrap();
        let wrong = map.update(&1u32.to_ne_bytes(), &7u32.to_ne_bytes()).unwrap_err();
        assert_eq!(wrong.kind(), io::ErrorKind::InvalidInput);
        assert!(map.update(&5u32.to_ne_bytes(), &7u64.to_ne_bytes()).is_err(), "index 5 of 2");
    }
}
