//! TODO(helper): tcp_info
