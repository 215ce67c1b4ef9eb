//! A small mutation fuzzer that runs on stable Rust.
//!
//! Inputs start from a seed corpus and are mutated (bit flips, interesting
//! bytes, dictionary tokens, splices, deletions). When the binary is built
//! with SanitizerCoverage's inline 8-bit counters (scripts/fuzz.sh sets the
//! `-Cpasses=sancov-module` flags for `FUZZ_COVERAGE=1`), an input that lights
//! up a new counter bucket joins the corpus, which is what makes a fuzzer
//! reach deep states; without them it is a plain seeded random mutator.
//! Everything is driven by one seeded PRNG, so a run is reproducible.

use std::cell::RefCell;
use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// xorshift64*: tiny, seedable, good enough to pick mutations.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform-ish in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

// ---------------------------------------------------------------------------
// Coverage feedback (only populated in an instrumented build)

/// Counter regions handed to us by the instrumentation, one per module.
static REGIONS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

/// Called by SanitizerCoverage-instrumented code at start-up, once per module.
///
/// # Safety
/// The runtime passes a valid `[start, stop)` range of counters that lives
/// for the whole process.
#[no_mangle]
pub unsafe extern "C" fn __sanitizer_cov_8bit_counters_init(start: *mut u8, stop: *mut u8) {
    if start.is_null() || stop <= start {
        return;
    }
    if let Ok(mut regions) = REGIONS.lock() {
        regions.push((start as usize, stop as usize));
    }
}

/// The instrumentation may also announce a PC table; we do not need it.
///
/// # Safety
/// Does nothing with its arguments.
#[no_mangle]
pub unsafe extern "C" fn __sanitizer_cov_pcs_init(_start: *const usize, _stop: *const usize) {}

/// Bucket a hit count the way AFL does, so "ran the loop 3 times instead of
/// 2" counts as new behaviour but 100 vs 101 does not.
fn bucket(count: u8) -> u8 {
    match count {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 4,
        4..=7 => 8,
        8..=15 => 16,
        16..=31 => 32,
        32..=127 => 64,
        _ => 128,
    }
}

struct Coverage {
    regions: Vec<(usize, usize)>,
    /// Per counter, the buckets seen so far (OR-ed).
    seen: Vec<u8>,
}

impl Coverage {
    fn new() -> Coverage {
        let regions = REGIONS.lock().map(|r| r.clone()).unwrap_or_default();
        let total = regions.iter().map(|(a, b)| b - a).sum();
        Coverage {
            regions,
            seen: vec![0; total],
        }
    }

    fn counters(&self) -> usize {
        self.seen.len()
    }

    fn reset(&self) {
        for &(start, stop) in &self.regions {
            // SAFETY: the range came from the instrumentation runtime and
            // stays valid; the counters are plain bytes.
            unsafe { std::ptr::write_bytes(start as *mut u8, 0, stop - start) };
        }
    }

    /// Fold the counters of the last run into `seen`; true if anything new.
    fn collect(&mut self) -> bool {
        let mut new = false;
        let mut offset = 0;
        for &(start, stop) in &self.regions {
            let len = stop - start;
            // SAFETY: as in `reset`.
            let counters = unsafe { std::slice::from_raw_parts(start as *const u8, len) };
            for (i, &c) in counters.iter().enumerate() {
                if c != 0 {
                    let b = bucket(c);
                    let slot = &mut self.seen[offset + i];
                    if *slot & b == 0 {
                        *slot |= b;
                        new = true;
                    }
                }
            }
            offset += len;
        }
        new
    }

    fn edges(&self) -> usize {
        self.seen.iter().filter(|&&b| b != 0).count()
    }
}

// ---------------------------------------------------------------------------
// Mutation

const INTERESTING: &[u8] = &[
    0, 1, 0x7F, 0x80, 0xFF, b'"', b'\\', b'{', b'}', b'[', b']', b':', b',', b'=', b'-', b'_',
    b'+', b'/', b' ', b'\n', b'0', b'9', b'e', b'E', b'.', b'u',
];

fn mutate_once(data: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>], dict: &[&[u8]], max: usize) {
    match rng.below(10) {
        0 if !data.is_empty() => {
            let i = rng.below(data.len());
            data[i] ^= 1 << rng.below(8);
        }
        1 if !data.is_empty() => {
            let i = rng.below(data.len());
            data[i] = INTERESTING[rng.below(INTERESTING.len())];
        }
        2 if !data.is_empty() => {
            let i = rng.below(data.len());
            data[i] = rng.next() as u8;
        }
        3 | 4 if !dict.is_empty() => {
            let token = dict[rng.below(dict.len())];
            let at = rng.below(data.len() + 1);
            if rng.chance(2) && at + token.len() <= data.len() {
                data[at..at + token.len()].copy_from_slice(token);
            } else {
                data.splice(at..at, token.iter().copied());
            }
        }
        5 if !data.is_empty() => {
            let at = rng.below(data.len());
            let len = 1 + rng.below((data.len() - at).min(16));
            data.drain(at..at + len);
        }
        6 if !data.is_empty() => {
            // Duplicate a range (repeated keys, nested values, long runs).
            let at = rng.below(data.len());
            let len = 1 + rng.below((data.len() - at).min(64));
            let chunk: Vec<u8> = data[at..at + len].to_vec();
            let to = rng.below(data.len() + 1);
            data.splice(to..to, chunk);
        }
        7 if !corpus.is_empty() => {
            // Splice: our head, another input's tail.
            let other = &corpus[rng.below(corpus.len())];
            if !other.is_empty() {
                let cut = rng.below(data.len() + 1);
                let from = rng.below(other.len());
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
        }
        8 if !data.is_empty() => {
            let at = rng.below(data.len() + 1);
            data.truncate(at);
        }
        _ => {
            // Insert a few random bytes.
            let at = rng.below(data.len() + 1);
            let n = 1 + rng.below(4);
            for _ in 0..n {
                data.insert(at, rng.next() as u8);
            }
        }
    }
    data.truncate(max);
}

// ---------------------------------------------------------------------------
// The loop

/// The function under test: called once per input.
pub type RunFn = Box<dyn FnMut(&[u8])>;

/// One fuzz target: its seeds, dictionary and the function under test.
pub struct Target {
    pub name: &'static str,
    pub seeds: Vec<Vec<u8>>,
    pub dict: Vec<&'static [u8]>,
    pub run: RunFn,
}

pub struct Options {
    pub duration: Duration,
    pub max_execs: u64,
    pub seed: u64,
    pub max_len: usize,
    pub crash_dir: PathBuf,
    pub corpus_dir: Option<PathBuf>,
}

pub struct Report {
    pub execs: u64,
    pub crashes: u64,
    pub corpus: usize,
    pub edges: usize,
    pub counters: usize,
    pub elapsed: Duration,
    pub slowest: Duration,
}

thread_local! {
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Panics are expected findings: record the message instead of printing it.
pub fn quiet_panics() {
    panic::set_hook(Box::new(|info| {
        let loc = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        LAST_PANIC.with(|p| *p.borrow_mut() = format!("{msg} at {loc}"));
    }));
}

/// Run one input, reporting a panic as `Err(message)`.
pub fn run_one(run: &mut dyn FnMut(&[u8]), input: &[u8]) -> Result<(), String> {
    panic::catch_unwind(AssertUnwindSafe(|| run(input)))
        .map_err(|_| LAST_PANIC.with(|p| p.borrow().clone()))
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn save(dir: &Path, data: &[u8]) {
    let _ = fs::create_dir_all(dir);
    let _ = fs::write(dir.join(format!("{:016x}", fnv(data))), data);
}

pub fn fuzz(target: &mut Target, opts: &Options) -> Report {
    let mut rng = Rng::new(opts.seed ^ fnv(target.name.as_bytes()));
    let mut cov = Coverage::new();
    let mut corpus: Vec<Vec<u8>> = target.seeds.clone();
    if let Some(dir) = &opts.corpus_dir {
        if let Ok(entries) = fs::read_dir(dir) {
            let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
            paths.sort();
            for p in paths {
                if let Ok(data) = fs::read(&p) {
                    corpus.push(data);
                }
            }
        }
    }
    if corpus.is_empty() {
        corpus.push(Vec::new());
    }
    let crash_dir = opts.crash_dir.join(target.name);
    let mut report = Report {
        execs: 0,
        crashes: 0,
        corpus: 0,
        edges: 0,
        counters: cov.counters(),
        elapsed: Duration::ZERO,
        slowest: Duration::ZERO,
    };
    let start = Instant::now();

    let mut exec = |input: &[u8], cov: &mut Coverage, report: &mut Report| -> bool {
        cov.reset();
        let t = Instant::now();
        let outcome = run_one(&mut target.run, input);
        let took = t.elapsed();
        report.execs += 1;
        if took > report.slowest {
            report.slowest = took;
        }
        if let Err(msg) = outcome {
            report.crashes += 1;
            // The first few are enough to reproduce; a broken property can
            // otherwise fill the disk in seconds.
            if report.crashes <= 20 {
                save(&crash_dir, input);
            }
            if report.crashes <= 3 {
                eprintln!(
                    "[{}] CRASH #{}: {msg} (saved to {}/{:016x})",
                    target.name,
                    report.crashes,
                    crash_dir.display(),
                    fnv(input)
                );
            }
        }
        cov.collect()
    };

    // Every seed once, so coverage starts from them.
    for seed in corpus.clone() {
        exec(&seed, &mut cov, &mut report);
    }
    let dict = target.dict.clone();
    let mut input = Vec::with_capacity(opts.max_len);
    while report.execs < opts.max_execs {
        if report.execs.is_multiple_of(256) && start.elapsed() >= opts.duration {
            break;
        }
        input.clear();
        input.extend_from_slice(&corpus[rng.below(corpus.len())]);
        let stack = 1 + rng.below(8);
        for _ in 0..stack {
            mutate_once(&mut input, &mut rng, &corpus, &dict, opts.max_len);
        }
        if exec(&input, &mut cov, &mut report) {
            corpus.push(input.clone());
            if let Some(dir) = &opts.corpus_dir {
                save(dir, &input);
            }
        }
    }
    report.corpus = corpus.len();
    report.edges = cov.edges();
    report.elapsed = start.elapsed();
    report
}
