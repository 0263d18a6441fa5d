#![no_main]
//! See `hookgate::fuzzing::provider_file`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| hookgate::fuzzing::provider_file(data));
