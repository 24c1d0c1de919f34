//! Feeds arbitrary bytes to a ZMTP connection, as a peer would send them: after a valid
//! greeting and READY (first input byte odd) or from the first byte, in pieces cut by the
//! second input byte, with a small message limit, then runs its timers far ahead. It must
//! return a typed error or take the bytes, never panic, and never hold more than the limit
//! of a message's frames.
#![no_main]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use zmtp::{Config, Connection, Event, SocketType};

const LIMIT: u64 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Some((&cut, rest)) = rest.split_first() else {
        return;
    };
    let now = Instant::now();
    let mut config = Config::new(SocketType::Router);
    config.max_message_size = LIMIT;
    let mut conn = Connection::new(config, now);
    let mut input = BytesMut::new();
    if mode & 1 == 1 {
        input.extend_from_slice(&zmtp::greeting::encode(b"NULL", false));
        let mut props = Vec::new();
        zmtp::command::put_property(&mut props, b"Socket-Type", b"DEALER");
        zmtp::command::write(&mut input, b"READY", &props);
    }
    for piece in rest.chunks(usize::from(cut).max(1)) {
        input.extend_from_slice(piece);
        if conn.handle_input(&mut input, now).is_err() {
            break;
        }
        while let Some(event) = conn.poll_event() {
            if let Event::Message(frames) = event {
                let size: usize = frames.iter().map(|f| f.len()).sum();
                assert!(size as u64 <= LIMIT, "a message over the limit got through");
            }
        }
    }
    let _ = conn.handle_timeout(now + Duration::from_secs(3600));
});
