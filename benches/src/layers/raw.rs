//! The limit: plain libzmq through the `zmq` crate, blocking calls, no framework.
//!
//! The server is a ROUTER that forwards every message back frame by frame (the same
//! `zmq::Message`s, no copy); the client a DEALER that keeps `window` payloads in flight and
//! matches replies in order (one connection, one echo: libzmq keeps the order).

use std::collections::VecDeque;
use std::time::Instant;

use super::{announce, Job, HWM};
use crate::error::{Error, Result};
use crate::measure::{Plan, Point, Recorder};

/// The endpoint a socket really bound, as text.
fn last_endpoint(socket: &zmq::Socket) -> Result<String> {
    Ok(match socket.get_last_endpoint()? {
        Ok(endpoint) => endpoint,
        Err(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// ROUTER echo in this thread, until the process ends.
pub(super) fn serve(endpoint: &str) -> Result<()> {
    let ctx = zmq::Context::new();
    let router = ctx.socket(zmq::ROUTER)?;
    router.set_sndhwm(HWM)?;
    router.set_rcvhwm(HWM)?;
    router.bind(endpoint)?;
    announce(&last_endpoint(&router)?)?;
    loop {
        // The routing id first, then the body frames, each sent on as it arrives.
        let mut id = zmq::Message::new();
        router.recv(&mut id, 0)?;
        router.send(id, zmq::SNDMORE)?;
        loop {
            let mut part = zmq::Message::new();
            router.recv(&mut part, 0)?;
            let more = part.get_more();
            router.send(part, if more { zmq::SNDMORE } else { 0 })?;
            if !more {
                break;
            }
        }
    }
}

/// DEALER client in this thread: one point.
pub(super) fn client(job: &Job) -> Result<Point> {
    let ctx = zmq::Context::new();
    let dealer = ctx.socket(zmq::DEALER)?;
    dealer.set_sndhwm(HWM)?;
    dealer.set_rcvhwm(HWM)?;
    dealer.set_linger(0)?;
    dealer.connect(&job.endpoint)?;
    let payload = job.payload();
    let mut reply = zmq::Message::new();
    // One round trip so the connection is up before the plan starts.
    dealer.send(&payload[..], 0)?;
    dealer.recv(&mut reply, 0)?;

    let mut recorder = Recorder::new(Plan::starting_now(job.warmup, job.duration));
    let window = job.window.max(1);
    let mut sent_at = VecDeque::with_capacity(window);
    for _ in 0..window {
        sent_at.push_back(Instant::now());
        dealer.send(&payload[..], 0)?;
    }
    while !sent_at.is_empty() {
        dealer.recv(&mut reply, 0)?;
        let now = Instant::now();
        job.check_reply(reply.len())?;
        let sent = sent_at.pop_front().ok_or_else(|| Error::UnexpectedReply)?;
        recorder.record(sent, now);
        if recorder.keep_sending(now) {
            sent_at.push_back(now);
            dealer.send(&payload[..], 0)?;
        }
    }
    Ok(recorder.finish(job.layer, job.size, window))
}
