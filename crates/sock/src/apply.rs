//! TODO(helper): apply
