//! The only code in this crate that calls `libc`: thin, safe wrappers around `getsockopt` and
//! `setsockopt` for the options `socket2` does not cover, each `unsafe` block justified.

#![allow(unsafe_code)]

pub mod info;
pub mod opts;
