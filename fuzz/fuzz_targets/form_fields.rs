#![no_main]
//! See `hookgate::fuzzing::form_fields`.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| hookgate::fuzzing::form_fields(data));
