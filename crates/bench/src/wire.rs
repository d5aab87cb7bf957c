//! TODO: wire
