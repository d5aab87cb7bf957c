//! TODO(helper): sys opts
