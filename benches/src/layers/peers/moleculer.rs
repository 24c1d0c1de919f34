//! The Moleculer row: a Node.js ServiceBroker with its TCP transporter (npm package
//! `moleculer`), both roles in JavaScript under `benches/peers/moleculer/`.
//!
//! The server role runs `node serve.js` as a helper and relays the endpoint it prints. The
//! client role runs `node client.js` with the point's parameters; the script measures by the
//! harness's method (its `measure.js` mirrors `measure.rs` and `stats.rs`) and prints a
//! [`Point`] line, which this role checks and returns.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::process::Helper;
use super::PeerError;
use crate::error::{Error, Result};
use crate::layers::{announce, Job, Layer};
use crate::measure::Point;

/// The scripts' directory, in this source tree.
fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("peers")
        .join("moleculer")
}

/// `node` running `script` of [`scripts`], stdout piped, stderr shared with this process;
/// checks first that the npm packages are installed.
fn node(script: &str) -> Result<Command, PeerError> {
    let dir = scripts();
    if !dir.join("node_modules").join("moleculer").is_dir() {
        return Err(PeerError::NotInstalled {
            what: "moleculer (npm)",
            hint: "npm ci in benches/peers/moleculer",
        });
    }
    let mut command = Command::new(std::env::var_os("NODE").unwrap_or_else(|| "node".into()));
    command
        .arg(dir.join(script))
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    Ok(command)
}

/// Server role: relays the endpoint `serve.js` prints, then serves until this process ends
/// (an error if the script ends first).
pub(crate) fn serve() -> Result<()> {
    let mut server = Helper::spawn(node("serve.js")?, "moleculer serve.js")?;
    let stdout = server
        .take_stdout()
        .ok_or(PeerError::NoEndpoint { what: server.what })?;
    let mut lines = BufReader::new(stdout).lines();
    let endpoint = lines
        .next()
        .transpose()?
        .map(|line| line.trim().to_owned())
        .filter(|line| !line.is_empty())
        .ok_or(PeerError::NoEndpoint { what: server.what })?;
    announce(&endpoint)?;
    // Anything more it prints goes to stderr, so that its pipe never fills.
    for line in lines {
        eprintln!("moleculer serve.js: {}", line?);
    }
    let what = server.what;
    let status = server.wait_blocking();
    Err(PeerError::Exited { what, status }.into())
}

/// The `client.js` arguments for `job`.
fn client_args(job: &Job) -> Vec<String> {
    vec![
        "--endpoint".into(),
        job.endpoint.clone(),
        "--size".into(),
        job.size.to_string(),
        "--window".into(),
        job.window.max(1).to_string(),
        "--warmup".into(),
        job.warmup.as_secs_f64().to_string(),
        "--duration".into(),
        job.duration.as_secs_f64().to_string(),
    ]
}

/// Checks that `point` is the one `job` asked for.
fn check_point(job: &Job, point: Point) -> Result<Point, PeerError> {
    let window = job.window.max(1);
    if point.layer == Layer::Moleculer && point.size == job.size && point.window == window {
        Ok(point)
    } else {
        Err(PeerError::WrongPoint {
            asked: format!("{} {} B window {window}", Layer::Moleculer, job.size),
            got: format!("{} {} B window {}", point.layer, point.size, point.window),
        })
    }
}

/// Client role: runs `client.js` for one point and returns the point it printed.
pub(crate) fn client(job: &Job) -> Result<Point> {
    let mut command = node("client.js")?;
    command.args(client_args(job));
    let mut client = Helper::spawn(command, "moleculer client.js")?;
    let mut output = String::new();
    if let Some(mut stdout) = client.take_stdout() {
        stdout.read_to_string(&mut output)?;
    }
    let what = client.what;
    let status = client.wait_blocking();
    if !status.is_some_and(|s| s.success()) {
        return Err(PeerError::Exited { what, status }.into());
    }
    let line = output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| Error::NoResult {
            what: what.to_owned(),
        })?;
    Ok(check_point(job, serde_json::from_str(line)?)?)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn job() -> Job {
        Job {
            layer: Layer::Moleculer,
            endpoint: "tcp://127.0.0.1:1/bench-server".into(),
            size: 100,
            window: 10,
            warmup: Duration::from_millis(1500),
            duration: Duration::from_secs(3),
        }
    }

    #[test]
    fn the_script_gets_the_points_parameters() {
        assert_eq!(
            client_args(&job()),
            [
                "--endpoint",
                "tcp://127.0.0.1:1/bench-server",
                "--size",
                "100",
                "--window",
                "10",
                "--warmup",
                "1.5",
                "--duration",
                "3"
            ]
        );
    }

    #[test]
    fn a_point_the_script_prints_is_parsed_and_checked() {
        let line = r#"{"layer":"moleculer","size":100,"window":10,"completed":2478,"seconds":3,"rate":826,"latency_us":{"mean":8138.5,"p50":3535.2,"p95":29280.0,"p99":50495.8}}"#;
        let point: Point = serde_json::from_str(line).unwrap();
        let point = check_point(&job(), point).unwrap();
        assert_eq!(point.completed, 2478);
        assert_eq!(point.latency_us.unwrap().p50, 3535.2);
        let other: Point =
            serde_json::from_str(&line.replace("\"size\":100", "\"size\":1000")).unwrap();
        assert!(matches!(
            check_point(&job(), other),
            Err(PeerError::WrongPoint { .. })
        ));
    }
}
