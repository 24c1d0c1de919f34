//! Runs the built harness end to end: server and client processes for three layers, then the
//! report files. Asserts what a user checks (it ran, every row is there, the numbers are
//! real), not how fast anything is: timing belongs to the report, not to a test.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The whole run must end within this, or it is killed and the test fails.
const LIMIT: Duration = Duration::from_secs(120);

/// A fresh directory for this test's report.
fn out_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("benches-harness-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_quick_run_measures_floor_raw_and_node_and_writes_the_report() {
    let out = out_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_benches"))
        .args(["--quick", "--sizes", "100", "--windows", "1,10"])
        .args(["--layers", "floor,raw,node", "--out"])
        .arg(&out)
        .env_remove("GATE")
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
            panic!("the harness ran longer than {LIMIT:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "the harness exited with {status}");

    let json = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let report: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(
        rows.len(),
        6,
        "floor, raw and node at windows 1 and 10: {rows:#?}"
    );
    for layer in ["floor", "raw", "node"] {
        for window in [1, 10] {
            let row = rows
                .iter()
                .find(|r| r["layer"] == layer && r["window"] == window)
                .unwrap_or_else(|| panic!("no {layer} row at window {window}"));
            assert_eq!(row["size"], 100);
            assert!(row["rate"].as_f64().unwrap() > 0.0, "{row}");
            assert!(row["completed"].as_u64().unwrap() > 0, "{row}");
            let latency = &row["latency_us"];
            for key in ["mean", "p50", "p95", "p99"] {
                assert!(latency[key].as_f64().unwrap() > 0.0, "{key} in {row}");
            }
            assert!(latency["p50"].as_f64() <= latency["p99"].as_f64(), "{row}");
            assert!(row["ratio_to_raw"].as_f64().unwrap() > 0.0, "{row}");
        }
    }
    assert!(report["failures"].as_array().unwrap().is_empty());
    assert!(report["machine"]["cores"].as_u64().unwrap() >= 1);

    let csv = std::fs::read_to_string(out.join("results.csv")).expect("results.csv");
    assert_eq!(csv.lines().count(), 7);
    for svg in ["throughput.svg", "latency.svg"] {
        let text = std::fs::read_to_string(out.join(svg)).expect(svg);
        assert!(text.starts_with("<svg"), "{svg}");
    }
    let _ = std::fs::remove_dir_all(&out);
}
