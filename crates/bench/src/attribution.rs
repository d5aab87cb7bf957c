//! TODO: attribution
