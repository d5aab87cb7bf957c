//! TODO(helper): recv
