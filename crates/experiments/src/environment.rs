//! The environment block (being written).
