//! Verdict rules (being written).
