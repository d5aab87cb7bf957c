//! Virtual-clock tests of the emulator model through its public API.

mod aqm;
mod codel;
mod constant_rate;
mod logs;
mod loss;
mod props;
mod queue_limits;
mod reorder;
mod timeline;
mod trace_mode;
mod util;
