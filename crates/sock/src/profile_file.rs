//! TODO(helper): profile_file
