#![no_main]
//! See `hookgate::fuzzing::proxy_path`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| hookgate::fuzzing::proxy_path(data));
