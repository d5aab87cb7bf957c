//! TODO: context
