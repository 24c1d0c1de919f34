//! Runs the built harness's scale report at a tiny size (a hub and five peers in two
//! processes, short phases, two rounds) and checks what a user reads: every peer joined, ticks were
//! delivered, `request_any` was answered, the memory was measured, the files are there.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The whole run must end within this, or it is killed and the test fails.
const LIMIT: Duration = Duration::from_secs(120);

/// A fresh directory for this test's report.
fn out_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("benches-scale-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_tiny_scale_run_joins_every_peer_and_measures_both_rates() {
    let out = out_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_benches"))
        .args([
            "scale",
            "--peers",
            "5",
            "--sizes",
            "100",
            "--per-process",
            "3",
            "--rounds",
            "2",
        ])
        .args([
            "--duration",
            "0.3",
            "--warmup",
            "0.1",
            "--window",
            "10",
            "--out",
        ])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("the harness starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the harness") {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the scale run took longer than {LIMIT:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "the scale run exited with {status}");

    let json = std::fs::read_to_string(out.join("scale.json")).expect("scale.json");
    let report: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    assert!(report["failures"].as_array().is_some_and(Vec::is_empty));
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run["peers"], 5);
    assert_eq!(run["rounds"], 2);
    assert_eq!(report["all_rounds"].as_array().map(Vec::len), Some(2));
    assert_eq!(run["processes"], 2);
    assert!(run["join_s"].as_f64().is_some_and(|s| s > 0.0), "{run}");
    assert!(
        run["hub_rss_joined_kb"].as_u64().is_some_and(|kb| kb > 0),
        "{run}"
    );
    let size = &run["sizes"][0];
    assert_eq!(size["size"], 100);
    let tick_all = &size["tick_all"];
    assert!(
        tick_all["ticks_per_s"].as_f64().is_some_and(|r| r > 0.0),
        "{size}"
    );
    // Every tick handed to a socket reaches a peer: nothing is lost on loopback.
    assert!(
        tick_all["delivered"].as_u64() >= tick_all["sent"].as_u64(),
        "{size}"
    );
    let request_any = &size["request_any"];
    assert!(
        request_any["rate"].as_f64().is_some_and(|r| r > 0.0),
        "{size}"
    );
    assert!(request_any["latency_us"]["p50"]
        .as_f64()
        .is_some_and(|us| us > 0.0));
    let request_id = &size["request_id"];
    assert!(
        request_id["rate"].as_f64().is_some_and(|r| r > 0.0),
        "{size}"
    );

    let csv = std::fs::read_to_string(out.join("scale.csv")).expect("scale.csv");
    assert_eq!(csv.lines().count(), 2);
    let svg = std::fs::read_to_string(out.join("scale.svg")).expect("scale.svg");
    assert!(svg.starts_with("<svg"));
    let _ = std::fs::remove_dir_all(&out);
}
