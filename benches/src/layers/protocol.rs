//! The protocol layer: `protocol::Server` with an echo handler, `protocol::Client`.

use protocol::{request_fn, Client, Server};
use transport::Options;

use super::{announce, Job, HWM, REQUEST_TIMEOUT};
use crate::error::Result;
use crate::measure::{drive_concurrent, Plan, Point};

/// Server with an `echo` handler until the process ends.
pub(super) async fn serve(endpoint: &str) -> Result<()> {
    // The connection events are kept (not dropped) for the life of the server.
    let (server, _events) = Server::bind_with(
        endpoint,
        Options::default().hwm(HWM).engine(super::engine()),
        usize::MAX,
    )
    .await?;
    server.on_request(
        "echo",
        request_fn(|req| async move { Ok(req.payload().clone()) }),
    );
    announce(server.endpoint())?;
    std::future::pending::<()>().await;
    Ok(())
}

/// Client: one point; `connect_with` returns once the connection is up.
pub(super) async fn client(job: &Job) -> Result<Point> {
    let client = Client::connect_with(
        &job.endpoint,
        Options::default().hwm(HWM).engine(super::engine()),
        usize::MAX,
        REQUEST_TIMEOUT,
    )
    .await?;
    let payload = job.payload();
    let plan = Plan::starting_now(job.warmup, job.duration);
    // The server's end, made once: what a request is sent through.
    let server = client.peer();
    let recorder = drive_concurrent(job.window, plan, || async {
        let reply = server
            .request("echo", payload.clone(), REQUEST_TIMEOUT)
            .await?;
        job.check_reply(reply.payload().len())
    })
    .await?;
    client.close().await;
    Ok(recorder.finish(job.layer, job.size, job.window.max(1)))
}
