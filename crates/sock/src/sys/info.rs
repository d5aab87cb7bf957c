//! TODO(helper): sys info
