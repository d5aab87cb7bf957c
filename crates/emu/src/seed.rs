//! Seeds derived from seeds: each random stage of a path (a direction's loss, jitter and
//! flow hashing) gets its own reproducible stream from the one seed a path is given. Used by
//! [`crate::direction`] and the fq_codel flow hash; it uses neither.

/// One step of splitmix64: a well-mixed, reproducible seed derived from another.
pub(crate) fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
