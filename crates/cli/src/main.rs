//! The `tcptail` command line: a thin layer over the tcptail library crates.

fn main() {}
