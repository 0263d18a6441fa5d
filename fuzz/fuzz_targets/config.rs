#![no_main]
//! See `hookgate::fuzzing::config`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| hookgate::fuzzing::config(data));
