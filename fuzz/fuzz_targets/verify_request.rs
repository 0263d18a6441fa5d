#![no_main]
//! See `hookgate::fuzzing::verify_request`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| hookgate::fuzzing::verify_request(data));
