//! `byollm-fuzz`: fuzz the core's untrusted-input entry points on stable Rust.
//!
//! ```text
//! byollm-fuzz list
//! byollm-fuzz run <target|all> [--secs N] [--execs N] [--seed N] [--max-len N] [--corpus DIR]
//! byollm-fuzz replay <target> <file|dir>...
//! ```
//! `run` prints one line per target (`execs=… crashes=…`) and exits 1 if
//! anything crashed. `replay` runs saved inputs (crashes, regressions) once.

mod driver;
mod targets;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use driver::{Options, Target};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn files_in(path: &Path) -> Vec<PathBuf> {
    if path.is_dir() {
        let mut out: Vec<PathBuf> = fs::read_dir(path)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_file())
                    .collect()
            })
            .unwrap_or_default();
        out.sort();
        out
    } else if path.is_file() {
        vec![path.to_path_buf()]
    } else {
        Vec::new()
    }
}

/// Seeds for `inspect`: the request bodies of the reference's HTTP
/// transcript, each prefixed with its endpoint byte.
fn inspect_seeds() -> Vec<Vec<u8>> {
    const ENDPOINTS: [&str; 6] = ["pair", "claim", "fetch", "heartbeat", "result", "release"];
    let mut seeds = Vec::new();
    for path in files_in(&root().join("seeds/inspect")) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let ep = ENDPOINTS
            .iter()
            .position(|e| name.starts_with(e))
            .unwrap_or(0);
        if let Ok(body) = fs::read(&path) {
            let mut s = vec![ep as u8];
            s.extend_from_slice(&body);
            seeds.push(s);
        }
    }
    seeds
}

fn pick(name: &str) -> Vec<Target> {
    targets::all(inspect_seeds())
        .into_iter()
        .filter(|t| name == "all" || t.name == name)
        .collect()
}

fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cmd = args.first().map(String::as_str).unwrap_or("list");
    match cmd {
        "list" => {
            for t in targets::all(Vec::new()) {
                println!("{}", t.name);
            }
            ExitCode::SUCCESS
        }
        "run" => {
            let name = args.get(1).map(String::as_str).unwrap_or("all");
            let mut chosen = pick(name);
            if chosen.is_empty() {
                eprintln!("unknown target {name}");
                return ExitCode::from(2);
            }
            let corpus: Option<PathBuf> = args
                .iter()
                .position(|a| a == "--corpus")
                .and_then(|i| args.get(i + 1))
                .map(PathBuf::from);
            driver::quiet_panics();
            let mut crashed = false;
            let mut total = 0u64;
            for t in &mut chosen {
                let opts = Options {
                    duration: Duration::from_secs_f64(flag(&args, "--secs", 10.0)),
                    max_execs: flag(&args, "--execs", u64::MAX),
                    seed: flag(&args, "--seed", 0x5eed_u64),
                    max_len: flag(&args, "--max-len", 4096usize),
                    crash_dir: root().join("crashes"),
                    corpus_dir: corpus.as_ref().map(|c| c.join(t.name)),
                };
                let r = driver::fuzz(t, &opts);
                total += r.execs;
                crashed |= r.crashes > 0;
                let secs = r.elapsed.as_secs_f64();
                println!(
                    "target={} execs={} crashes={} corpus={} edges={}/{} secs={:.1} exec/s={:.0} slowest_ms={:.2}",
                    t.name,
                    r.execs,
                    r.crashes,
                    r.corpus,
                    r.edges,
                    r.counters,
                    secs,
                    r.execs as f64 / secs.max(1e-9),
                    r.slowest.as_secs_f64() * 1000.0
                );
            }
            println!("total execs={total} crashed={crashed}");
            if crashed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        "replay" => {
            let name = args.get(1).map(String::as_str).unwrap_or("");
            let mut chosen = pick(name);
            let Some(t) = chosen.first_mut() else {
                eprintln!("unknown target {name}");
                return ExitCode::from(2);
            };
            driver::quiet_panics();
            let mut failed = 0;
            let mut count = 0;
            for p in args.iter().skip(2) {
                for file in files_in(Path::new(p)) {
                    let Ok(data) = fs::read(&file) else { continue };
                    count += 1;
                    if let Err(msg) = driver::run_one(&mut t.run, &data) {
                        failed += 1;
                        println!("FAIL {}: {msg}", file.display());
                    }
                }
            }
            println!("replayed {count} inputs for {}: {failed} failed", t.name);
            if failed > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        other => {
            eprintln!("unknown command {other}; use list, run or replay");
            ExitCode::from(2)
        }
    }
}
