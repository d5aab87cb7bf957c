//! TODO: sys
#![allow(unsafe_code)]
