//! Values every layer shares (durations, secrets, times, stored headers),
//! the cryptographic building blocks (MACs, digests, encodings,
//! constant-time comparison) that verification, delivery and the admin
//! token check use, random tokens, retry timing and credentials in URLs.
//!
//! Rule: imports nothing from the crate, so every module may import it.

pub mod backoff;
pub mod budget;
pub mod crypto;
pub mod duration;
pub mod headers;
pub mod secret;
pub mod throttle;
pub mod time;
pub mod token;
pub mod url;
