//! A minimal reader of the kernel's BTF (`/sys/kernel/btf/vmlinux`): enough to find a struct's
//! members by name (through anonymous structs and unions, with bitfields), a type's size and a
//! function's BTF id, which is all the socket iterator needs to read kernel structs whose
//! layout changes with every kernel build.
//!
//! Pure and bounds-checked: a truncated or malformed blob is a [`BtfError`], never a panic.
//! Layout: `include/uapi/linux/btf.h` (a 24-byte header, then the type section and the string
//! section, both at offsets from the end of the header; type ids count from 1).

/// Why BTF could not be read or a name was not found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BtfError {
    /// Not BTF, or a section runs past the end.
    #[error("malformed BTF: {0}")]
    Malformed(&'static str),
    /// No type of that kind and name.
    #[error("BTF has no {kind} named {name}")]
    Missing {
        /// What was looked for (`struct`, `func`).
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// A member path names a member the struct does not have.
    #[error("BTF struct {parent} has no member {member}")]
    NoMember {
        /// The struct (or member path) searched.
        parent: String,
        /// The missing member.
        member: String,
    },
}

const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// One type's fixed part and where its kind-specific data starts.
#[derive(Debug, Clone, Copy)]
struct Type {
    name_off: u32,
    info: u32,
    size_or_type: u32,
    /// Offset of the kind-specific data in the type section.
    data: usize,
}

impl Type {
    fn kind(self) -> u32 {
        (self.info >> 24) & 0x1f
    }
    fn vlen(self) -> usize {
        (self.info & 0xffff) as usize
    }
    fn kind_flag(self) -> bool {
        self.info >> 31 == 1
    }
}

/// A member found by [`Btf::member`]: where it is in the outer struct and how wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Offset from the start of the outer struct, bits.
    pub bit_offset: u32,
    /// Width in bits for a bitfield, 0 for an ordinary member.
    pub bitfield_bits: u32,
    /// Size of the member's type, bytes.
    pub size: u32,
}

impl Member {
    /// Byte offset (of the byte holding the first bit, for a bitfield).
    pub fn byte_offset(self) -> u32 {
        self.bit_offset / 8
    }
}

/// Parsed BTF: the type table and the strings.
#[derive(Debug)]
pub struct Btf {
    types: Vec<Type>,
    type_section: Vec<u8>,
    strings: Vec<u8>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

impl Btf {
    /// Parses a BTF blob (native endianness, as the running kernel exports it).
    pub fn parse(blob: &[u8]) -> Result<Btf, BtfError> {
        let bad = BtfError::Malformed;
        let magic = blob.get(..2).ok_or(bad("shorter than its header"))?;
        if u16::from_ne_bytes([magic[0], magic[1]]) != 0xeb9f {
            return Err(bad("bad magic"));
        }
        let field = |at| u32_at(blob, at).map(|v| v as usize).ok_or(bad("truncated header"));
        let hdr_len = field(4)?;
        let (type_off, type_len, str_off, str_len) =
            (field(8)?, field(12)?, field(16)?, field(20)?);
        let section = |off: usize, len: usize| {
            let start = hdr_len.checked_add(off).ok_or(bad("section offset overflows"))?;
            let end = start.checked_add(len).ok_or(bad("section length overflows"))?;
            blob.get(start..end).ok_or(bad("section runs past the end"))
        };
        let type_section = section(type_off, type_len)?.to_vec();
        let strings = section(str_off, str_len)?.to_vec();
        let mut types = vec![Type { name_off: 0, info: 0, size_or_type: 0, data: 0 }];
        let mut at = 0;
        while at < type_section.len() {
            let word = |i: usize| u32_at(&type_section, at + 4 * i).ok_or(bad("truncated type"));
            let t =
                Type { name_off: word(0)?, info: word(1)?, size_or_type: word(2)?, data: at + 12 };
            let extra = match t.kind() {
                KIND_INT => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION => 12 * t.vlen(),
                KIND_ENUM => 8 * t.vlen(),
                13 => 8 * t.vlen(),  // FUNC_PROTO
                14 | 17 => 4,        // VAR, DECL_TAG
                15 => 12 * t.vlen(), // DATASEC
                KIND_ENUM64 => 12 * t.vlen(),
                0 | 20.. => return Err(bad("unknown type kind")),
                _ => 0,
            };
            at = t.data + extra;
            if at > type_section.len() {
                return Err(bad("type data runs past the section"));
            }
            types.push(t);
        }
        Ok(Btf { types, type_section, strings })
    }

    fn name(&self, off: u32) -> &[u8] {
        let rest = self.strings.get(off as usize..).unwrap_or_default();
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    }

    fn ty(&self, id: u32) -> Result<Type, BtfError> {
        self.types.get(id as usize).copied().ok_or(BtfError::Malformed("type id out of range"))
    }

    fn find(&self, kind: u32, name: &str) -> Option<u32> {
        let wanted = name.as_bytes();
        let found = self
            .types
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, t)| t.kind() == kind && self.name(t.name_off) == wanted);
        found.map(|(id, _)| id as u32)
    }

    /// The BTF id of the function `name` (a BPF iterator attaches to `bpf_iter_<target>`).
    pub fn func_id(&self, name: &str) -> Result<u32, BtfError> {
        self.find(KIND_FUNC, name)
            .ok_or_else(|| BtfError::Missing { kind: "func", name: name.to_owned() })
    }

    /// The BTF id of the typedef `name` (a `tp_btf` program attaches to `btf_trace_<event>`).
    pub fn typedef_id(&self, name: &str) -> Result<u32, BtfError> {
        self.find(KIND_TYPEDEF, name)
            .ok_or_else(|| BtfError::Missing { kind: "typedef", name: name.to_owned() })
    }

    /// The BTF id of `struct name`.
    pub fn struct_id(&self, name: &str) -> Result<u32, BtfError> {
        self.find(KIND_STRUCT, name)
            .ok_or_else(|| BtfError::Missing { kind: "struct", name: name.to_owned() })
    }

    /// The size in bytes of `struct name`.
    pub fn struct_size(&self, name: &str) -> Result<u32, BtfError> {
        Ok(self.ty(self.struct_id(name)?)?.size_or_type)
    }

    /// Follows typedefs and qualifiers to the underlying type.
    fn resolve(&self, mut id: u32) -> Result<u32, BtfError> {
        for _ in 0..32 {
            let t = self.ty(id)?;
            match t.kind() {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.size_or_type;
                }
                _ => return Ok(id),
            }
        }
        Err(BtfError::Malformed("typedef chain too long"))
    }

    /// Size in bytes of type `id`.
    fn size_of(&self, id: u32) -> Result<u32, BtfError> {
        let t = self.ty(self.resolve(id)?)?;
        match t.kind() {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 | 16 => {
                Ok(t.size_or_type)
            }
            KIND_PTR => Ok(8),
            KIND_ARRAY => {
                let elem =
                    u32_at(&self.type_section, t.data).ok_or(BtfError::Malformed("array"))?;
                let n =
                    u32_at(&self.type_section, t.data + 8).ok_or(BtfError::Malformed("array"))?;
                Ok(self.size_of(elem)?.saturating_mul(n))
            }
            _ => Err(BtfError::Malformed("member of a type without a size")),
        }
    }

    /// Member `name` of struct/union `id` (searching anonymous members too): its bit offset
    /// within `id`, bitfield width and type.
    fn find_member(
        &self,
        id: u32,
        name: &[u8],
        depth: u32,
    ) -> Result<Option<(u32, u32, u32)>, BtfError> {
        let t = self.ty(self.resolve(id)?)?;
        if !matches!(t.kind(), KIND_STRUCT | KIND_UNION) || depth > 8 {
            return Ok(None);
        }
        for i in 0..t.vlen() {
            let at = t.data + 12 * i;
            let word = |k: usize| {
                u32_at(&self.type_section, at + 4 * k).ok_or(BtfError::Malformed("member"))
            };
            let (name_off, ty, raw_off) = (word(0)?, word(1)?, word(2)?);
            let (bit_offset, bits) =
                if t.kind_flag() { (raw_off & 0xff_ffff, raw_off >> 24) } else { (raw_off, 0) };
            let member_name = self.name(name_off);
            if member_name == name {
                return Ok(Some((bit_offset, bits, ty)));
            }
            if member_name.is_empty()
                && let Some((off, b, found)) = self.find_member(ty, name, depth + 1)?
            {
                return Ok(Some((bit_offset + off, b, found)));
            }
        }
        Ok(None)
    }

    /// The array member at `path` of `struct root`: its element type id and element size.
    fn array_elem(&self, root: &str, path: &str) -> Result<(u32, u32), BtfError> {
        let (_, ty) = self.member_and_type(root, path)?;
        let t = self.ty(self.resolve(ty)?)?;
        if t.kind() != KIND_ARRAY {
            return Err(BtfError::NoMember {
                parent: root.to_owned(),
                member: format!("{path}[]"),
            });
        }
        let elem = u32_at(&self.type_section, t.data).ok_or(BtfError::Malformed("array"))?;
        Ok((elem, self.size_of(elem)?))
    }

    /// Size in bytes of one element of the array member at `path` of `struct root`.
    pub fn array_elem_size(&self, root: &str, path: &str) -> Result<u32, BtfError> {
        Ok(self.array_elem(root, path)?.1)
    }

    /// Name of the struct the array member at `path` of `struct root` holds.
    pub fn array_elem_struct(&self, root: &str, path: &str) -> Result<String, BtfError> {
        let (elem, _) = self.array_elem(root, path)?;
        let t = self.ty(self.resolve(elem)?)?;
        if t.kind() != KIND_STRUCT {
            return Err(BtfError::Malformed("array element is not a named struct"));
        }
        Ok(String::from_utf8_lossy(self.name(t.name_off)).into_owned())
    }

    /// The member at `path` (dot-separated, e.g. `inet_conn.icsk_inet.sk.__sk_common.skc_state`)
    /// of `struct root`.
    pub fn member(&self, root: &str, path: &str) -> Result<Member, BtfError> {
        Ok(self.member_and_type(root, path)?.0)
    }

    fn member_and_type(&self, root: &str, path: &str) -> Result<(Member, u32), BtfError> {
        let mut id = self.struct_id(root)?;
        let mut bit_offset = 0;
        let mut bits = 0;
        for part in path.split('.') {
            let found = self.find_member(id, part.as_bytes(), 0)?;
            let (off, b, ty) = found.ok_or_else(|| BtfError::NoMember {
                parent: root.to_owned(),
                member: path.to_owned(),
            })?;
            bit_offset += off;
            bits = b;
            id = ty;
        }
        Ok((Member { bit_offset, bitfield_bits: bits, size: self.size_of(id)? }, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built blob: `struct s { int a; union { char b; }; unsigned c:3; }` and a func.
    fn blob() -> Vec<u8> {
        let strings = b"\0s\0a\0b\0c\0int\0f\0".to_vec();
        let mut t = Vec::new();
        let mut push = |w: &[u32]| w.iter().for_each(|v| t.extend_from_slice(&v.to_ne_bytes()));
        // 1: int (size 4), encoding word
        push(&[9, KIND_INT << 24, 4, 32]);
        // 2: anonymous union { b: int at 0 }
        push(&[0, KIND_UNION << 24 | 1, 4, 5, 1, 0]);
        // 3: struct s, kind_flag (bitfields), 3 members, size 12
        push(&[1, 1 << 31 | KIND_STRUCT << 24 | 3, 12, 3, 1, 0, 0, 2, 32, 7, 1, 3 << 24 | 64]);
        // 4: func f
        push(&[13, KIND_FUNC << 24, 0]);
        let mut b = Vec::new();
        for w in [0xeb9fu32 | 1 << 16, 24, 0, t.len() as u32, t.len() as u32, strings.len() as u32]
        {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        // magic is a u16 followed by version 1 and flags 0
        b[..4].copy_from_slice(&[0x9f, 0xeb, 1, 0]);
        if cfg!(target_endian = "big") {
            b[..2].copy_from_slice(&[0xeb, 0x9f]);
        }
        b.extend_from_slice(&t);
        b.extend_from_slice(&strings);
        b
    }

    #[test]
    fn finds_members_through_anonymous_unions_and_bitfields() {
        let btf = Btf::parse(&blob()).unwrap();
        assert_eq!(btf.struct_size("s").unwrap(), 12);
        assert_eq!(
            btf.member("s", "a").unwrap(),
            Member { bit_offset: 0, bitfield_bits: 0, size: 4 }
        );
        assert_eq!(
            btf.member("s", "b").unwrap(),
            Member { bit_offset: 32, bitfield_bits: 0, size: 4 }
        );
        assert_eq!(
            btf.member("s", "c").unwrap(),
            Member { bit_offset: 64, bitfield_bits: 3, size: 4 }
        );
        assert_eq!(btf.func_id("f").unwrap(), 4);
        assert!(matches!(btf.member("s", "z"), Err(BtfError::NoMember { .. })));
        assert!(matches!(btf.func_id("g"), Err(BtfError::Missing { .. })));
    }

    #[test]
    fn truncated_blobs_are_errors() {
        let b = blob();
        for len in 0..b.len() {
            let _ = Btf::parse(&b[..len]);
        }
        assert!(Btf::parse(&b[..30]).is_err());
    }

    #[test]
    fn reads_the_running_kernels_tcp_sock() {
        let blob =
            std::fs::read("/sys/kernel/btf/vmlinux").expect("kernel BTF (CI kernels have it)");
        let btf = Btf::parse(&blob).unwrap();
        let state = btf.member("tcp_sock", "inet_conn.icsk_inet.sk.__sk_common.skc_state").unwrap();
        assert_eq!(state.size, 1);
        assert!(btf.member("tcp_sock", "srtt_us").unwrap().byte_offset() > 0);
        assert!(btf.func_id("bpf_iter_tcp").is_ok());
    }
}
