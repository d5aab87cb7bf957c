//! TODO(helper): cc_info
