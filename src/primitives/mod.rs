//! Values every layer shares (durations, secrets, times).
//!
//! Rule: imports nothing from the crate, so every module may import it.

pub mod duration;
pub mod secret;
pub mod time;
