//! `zeronode bench`: the benchmark harness behind the `zeronode` command. A short run of two
//! layers must re-execute `zeronode bench serve|client ...`, measure both and write the
//! report; `--help` must be the harness's. What a user checks, not how fast anything is.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_zeronode");

/// The whole run must end within this, or it is killed and the test fails.
const LIMIT: Duration = Duration::from_secs(120);

/// A fresh directory for this test's report.
fn out_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zeronode-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn bench_measures_raw_and_node_and_writes_results() {
    let out = out_dir();
    let mut child = Command::new(BIN)
        .args(["bench", "--quick", "--layers", "raw,node", "--sizes", "100"])
        .args(["--windows", "1", "--out"])
        .arg(&out)
        .env_remove("GATE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("zeronode starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for zeronode bench") {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("zeronode bench ran longer than {LIMIT:?} and was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "zeronode bench exited with {status}");

    let json = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let report: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let rows = report["rows"].as_array().expect("rows");
    for layer in ["raw", "node"] {
        let row = rows
            .iter()
            .find(|r| r["layer"] == layer)
            .unwrap_or_else(|| panic!("no {layer} row in {rows:#?}"));
        assert_eq!(row["size"], 100);
        assert_eq!(row["window"], 1);
        assert!(row["rate"].as_f64().is_some_and(|r| r > 0.0), "{row}");
    }
    assert!(report["failures"].as_array().is_some_and(Vec::is_empty));
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bench_help_is_the_harness_help() {
    let output = Command::new(BIN)
        .args(["bench", "--help"])
        .output()
        .expect("zeronode runs");
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8_lossy(&output.stdout);
    for option in ["--layers", "--windows", "--rounds", "--quick", "scale"] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
    assert!(help.contains("zeronode bench"), "{help}");
}

#[test]
fn bench_streams_prints_every_figure_beside_its_reference() {
    // Short phases and a small long stream: the test checks the report, not the speed.
    let output = assert_cmd::Command::new(BIN)
        .args(["bench", "streams", "--duration", "0.2", "--warmup", "0"])
        .args(["--rounds", "1", "--long-mib", "8"])
        .timeout(LIMIT)
        .output()
        .expect("zeronode bench streams runs");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    for row in [
        "| `tcp-bulk` 128 KiB writes and reads |",
        "| `stream-64k` raw items |",
        "x `node-native-tick`",
        "x request round trip p50",
        "| long stream 8 MiB in ",
        "load average: ",
    ] {
        assert!(text.contains(row), "no {row:?} in\n{text}");
    }
    // Both processes' memory was read: no "?" in the long stream's row.
    let long = text.lines().find(|l| l.contains("long stream"));
    assert!(long.is_some_and(|l| !l.contains('?')), "{text}");
}
