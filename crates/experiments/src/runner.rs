//! The runner (being written).
