#![no_main]
//! See `hookgate::fuzzing::client_ip`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| hookgate::fuzzing::client_ip(data));
