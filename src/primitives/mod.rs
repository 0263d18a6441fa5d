//! Values every layer shares (durations, secrets, times); imports nothing from the crate.

pub mod time;
