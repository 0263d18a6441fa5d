//! Values every layer shares (durations, secrets, times, stored headers).
//!
//! Rule: imports nothing from the crate, so every module may import it.

pub mod duration;
pub mod headers;
pub mod secret;
pub mod time;
