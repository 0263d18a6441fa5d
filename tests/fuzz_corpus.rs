//! The fuzz targets' seed corpora (`fuzz/corpus/<target>/`) fed through the
//! same entry points as `cargo fuzz` uses (`hookgate::fuzzing`), then a
//! fixed-seed randomized smoke run of mutated seeds: a stand-in for the
//! fuzzer where no nightly toolchain / cargo-fuzz is available. Nothing may
//! panic. The execution count is printed and recorded in docs/operations.md.

use hookgate::fuzzing::TARGETS;
use std::path::Path;

/// Mutated inputs per target in the smoke run.
const SMOKE_RUNS: usize = 10_000;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut seeds: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    // The real provider files and example configs are seeds too.
    let extra = match target {
        "provider_file" => Some("providers"),
        _ => None,
    };
    if let Some(d) = extra {
        for e in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(d)).unwrap() {
            seeds.push(std::fs::read(e.unwrap().path()).unwrap());
        }
    }
    assert!(!seeds.is_empty(), "no seeds for {target}");
    seeds
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One libFuzzer-style mutation: flip, insert, delete, truncate, splice,
/// or insert a token that parsers care about.
fn mutate(rng: &mut Rng, input: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    const TOKENS: &[&[u8]] = &[
        b",",
        b"=",
        b";",
        b"|",
        b":",
        b"\n",
        b"\0",
        b"{",
        b"}",
        b"[",
        b"]",
        b"\"",
        b"%0A",
        b"v1=",
        b"t=",
        b"ts=",
        b"sha256=",
        b"\xff",
        b"\xc3\xa9",
        b"-1",
        b"99999999999999999999",
        b"/",
        b"..",
        b"%2e",
        b"%2F",
        b"%5c",
        b"%25",
        b"&",
    ];
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(out.len() + 1);
        match rng.below(6) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                out.splice(at..at, t.iter().copied());
            }
            2 if at < out.len() => {
                let end = (at + 1 + rng.below(16)).min(out.len());
                out.drain(at..end);
            }
            3 => out.truncate(at),
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len() + 1);
                out.splice(at..at, other[from..].iter().copied());
            }
            _ => out.insert(at, rng.next() as u8),
        }
    }
    out
}

#[test]
fn every_seed_passes_through_every_fuzz_target_without_panicking() {
    for (name, run) in TARGETS {
        for seed in corpus(name) {
            if *name == "verify_request" {
                // Every seed against every provider (the first byte selects it).
                for sel in 0..=u8::MAX {
                    let mut input = seed.clone();
                    if let Some(b) = input.first_mut() {
                        *b = sel;
                    }
                    run(&input);
                }
            } else {
                run(&seed);
            }
        }
    }
}

#[test]
fn a_fixed_seed_randomized_smoke_run_finds_no_panic() {
    let mut executions = 0;
    for (i, (name, run)) in TARGETS.iter().enumerate() {
        let seeds = corpus(name);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ i as u64);
        for _ in 0..SMOKE_RUNS {
            let base = &seeds[rng.below(seeds.len())];
            let input = mutate(&mut rng, base, &seeds);
            run(&input);
            executions += 1;
        }
    }
    println!("fuzz smoke: {executions} executions");
    assert_eq!(executions, SMOKE_RUNS * TARGETS.len());
}
