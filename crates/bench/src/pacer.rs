//! TODO: pacer
