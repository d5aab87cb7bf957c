//! TODO: matrix
