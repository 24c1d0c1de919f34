//! The NATS row: request/reply through a `nats-server` broker (Debian's package), with the
//! async-nats client on both sides.
//!
//! The server role starts `nats-server` on a free loopback port as a helper process, then
//! answers on [`SUBJECT`] with an async-nats subscriber that publishes every payload back to
//! the request's reply subject; it prints the server's URL as its endpoint. The client role
//! connects to that URL and measures async-nats `request` with the same window driver as the
//! protocol and node rows. Every round trip crosses the broker twice (client to server to
//! responder, and back): three processes share the machine's cores.

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_nats::{Client, ConnectOptions};
use futures::StreamExt;

use super::process::{find_program, Helper};
use super::PeerError;
use crate::error::Result;
use crate::layers::{announce, Job, REQUEST_TIMEOUT};
use crate::measure::{drive_concurrent, Plan, Point};

/// The subject the responder answers on.
const SUBJECT: &str = "bench.echo";

/// How long `nats-server` may take to accept connections.
const SERVER_READY: Duration = Duration::from_secs(10);

/// Pause between two connection attempts while `nats-server` starts.
const RETRY: Duration = Duration::from_millis(50);

/// Directories searched for `nats-server` after `PATH` (Debian installs it in /usr/sbin).
const SYSTEM_DIRS: &[&str] = &["/usr/sbin", "/usr/local/sbin", "/usr/local/bin", "/sbin"];

/// The `nats-server` program: `$NATS_SERVER` if set, else found on `PATH` or in the system
/// directories.
fn nats_server() -> Result<PathBuf, PeerError> {
    if let Some(path) = std::env::var_os("NATS_SERVER") {
        return Ok(PathBuf::from(path));
    }
    find_program("nats-server", SYSTEM_DIRS).ok_or(PeerError::NotInstalled {
        what: "nats-server",
        hint: "apt-get install nats-server (or set NATS_SERVER to its path)",
    })
}

/// The arguments of a loopback-only `nats-server` on `port` (no monitoring port, no
/// clustering, no JetStream: what request/reply needs).
fn nats_server_args(port: u16) -> Vec<String> {
    vec![
        "--addr".into(),
        Ipv4Addr::LOCALHOST.to_string(),
        "--port".into(),
        port.to_string(),
    ]
}

/// A free TCP port on the loopback interface (bound, read, released: `nats-server` binds it
/// a moment later).
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// The options both sides connect with: a request timeout far above any latency measured,
/// so that a timeout means something broke.
fn options() -> ConnectOptions {
    ConnectOptions::new().request_timeout(Some(REQUEST_TIMEOUT))
}

/// Connects to the `nats-server` at `url` as soon as it accepts, while checking that it
/// still runs.
async fn connect_when_ready(url: &str, server: &mut Helper) -> Result<Client> {
    let deadline = Instant::now() + SERVER_READY;
    loop {
        match options().connect(url).await {
            Ok(client) => return Ok(client),
            Err(e) => {
                server.check_running()?;
                if Instant::now() >= deadline {
                    eprintln!("benches: nats: last connection error: {e}");
                    return Err(PeerError::NotReady {
                        what: server.what,
                        waited: SERVER_READY,
                    }
                    .into());
                }
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Server role: `nats-server` and the echo responder, until the process ends.
pub(crate) async fn serve() -> Result<()> {
    let program = nats_server()?;
    let port = free_port()?;
    let mut command = Helper::watched(&program, &nats_server_args(port));
    // Its log (a banner at every start) would be noise in the report; a failure shows as
    // an exit status or a connection that never comes up.
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let mut server = Helper::spawn(command, "nats-server")?;
    let url = format!("nats://{}:{port}", Ipv4Addr::LOCALHOST);
    let client = connect_when_ready(&url, &mut server).await?;
    let mut echo = client.subscribe(SUBJECT).await.map_err(PeerError::from)?;
    // The subscription has reached the server before the endpoint is printed.
    client.flush().await.map_err(PeerError::from)?;
    announce(&url)?;
    loop {
        tokio::select! {
            message = echo.next() => {
                let message = message.ok_or(PeerError::SubscriptionEnded)?;
                if let Some(reply) = message.reply {
                    client
                        .publish(reply, message.payload)
                        .await
                        .map_err(PeerError::from)?;
                }
            }
            status = server.exited() => return Err(server.exited_error(status).into()),
        }
    }
}

/// Client role: one point of async-nats `request` against the echo responder.
pub(crate) async fn client(job: &Job) -> Result<Point> {
    let client = options()
        .connect(job.endpoint.as_str())
        .await
        .map_err(PeerError::from)?;
    let payload = job.payload();
    // One round trip so the connection and the responder are up before the plan starts.
    let reply = client
        .request(SUBJECT, payload.clone())
        .await
        .map_err(PeerError::from)?;
    job.check_reply(reply.payload.len())?;
    let plan = Plan::starting_now(job.warmup, job.duration);
    let recorder = drive_concurrent(job.window, plan, || async {
        let reply = client
            .request(SUBJECT, payload.clone())
            .await
            .map_err(PeerError::from)?;
        job.check_reply(reply.payload.len())
    })
    .await?;
    Ok(recorder.finish(job.layer, job.size, job.window.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nats_server_listens_on_loopback_only() {
        assert_eq!(
            nats_server_args(4223),
            ["--addr", "127.0.0.1", "--port", "4223"]
        );
    }
}
