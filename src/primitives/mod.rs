//! Values every layer shares (durations, secrets, times) and the
//! cryptographic building blocks (MACs, digests, encodings, constant-time
//! comparison) that verification, delivery and the admin token check use.
//!
//! Rule: imports nothing from the crate, so every module may import it.

pub mod crypto;
pub mod duration;
pub mod secret;
pub mod time;
pub mod token;
