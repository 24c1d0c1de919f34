//! The transport layer: `transport::Router` echo, `transport::Dealer` client.
//!
//! Like the raw row, the client matches replies in order: the transport does no
//! correlation, so this row measures only the async socket driving.

use std::collections::VecDeque;
use std::time::Instant;

use transport::{Dealer, Options, Router};

use super::{announce, Job, HWM};
use crate::error::{Error, Result};
use crate::measure::{Plan, Point, Recorder};

/// Router echo until the process ends.
pub(super) async fn serve(endpoint: &str) -> Result<()> {
    let router = Router::with_options(Options::default().hwm(HWM).engine(super::engine()))?;
    announce(&router.bind(endpoint)?)?;
    // One receive buffer for the whole run; the frames go back borrowed.
    let mut frames = Vec::with_capacity(2);
    loop {
        let peer = router.recv_into(&mut frames).await?;
        router.send_frames(&peer, &frames).await?;
    }
}

/// Dealer client: one point.
pub(super) async fn client(job: &Job) -> Result<Point> {
    let dealer = Dealer::with_options(Options::default().hwm(HWM).engine(super::engine()))?;
    dealer.connect(&job.endpoint)?;
    let payload = job.payload();
    // One round trip so the connection is up before the plan starts.
    dealer.send_frames(std::slice::from_ref(&payload)).await?;
    dealer.recv().await?;

    let mut recorder = Recorder::new(Plan::starting_now(job.warmup, job.duration));
    let window = job.window.max(1);
    let mut sent_at = VecDeque::with_capacity(window);
    for _ in 0..window {
        sent_at.push_back(Instant::now());
        dealer.send_frames(std::slice::from_ref(&payload)).await?;
    }
    let mut frames = Vec::with_capacity(1);
    while !sent_at.is_empty() {
        dealer.recv_into(&mut frames).await?;
        let now = Instant::now();
        job.check_reply(frames.iter().map(|f| f.len()).sum())?;
        let sent = sent_at.pop_front().ok_or_else(|| Error::UnexpectedReply)?;
        recorder.record(sent, now);
        if recorder.keep_sending(now) {
            sent_at.push_back(now);
            dealer.send_frames(std::slice::from_ref(&payload)).await?;
        }
    }
    let point = recorder.finish(job.layer, job.size, window);
    dealer.close().await;
    Ok(point)
}
