//! Feeds arbitrary bytes to a ZMTP connection, as a peer would send them, in one of three
//! modes chosen by the first input byte: from the first byte; after a valid NULL greeting
//! and READY; or, on a CURVE server, after a whole CURVE handshake with a real client (the
//! bytes then land where MESSAGE boxes go: garbled boxes, replayed or rewound nonces,
//! short boxes). The pieces are cut by the second input byte, with a small message limit,
//! then the timers run far ahead. It must return a typed error or take the bytes, never
//! panic, and never hold more than the limit of a message's frames.
#![no_main]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use zmtp::curve::{CurveConfig, CurveKeys};
use zmtp::{Authorizer, Config, Connection, Event, Mechanism, SocketType};

const LIMIT: u64 = 1 << 16;

/// Moves what `from` has to write into `to`, whose unconsumed bytes (a partial greeting)
/// wait in `to_input`.
fn shuttle(
    from: &mut Connection,
    to: &mut Connection,
    to_input: &mut BytesMut,
    now: Instant,
) -> zmtp::Result<()> {
    {
        let out = from.outbox();
        let mut slices = [std::io::IoSlice::new(&[]); 64];
        let n = out.io_slices(&mut slices);
        let mut len = 0;
        for s in &slices[..n] {
            to_input.extend_from_slice(s);
            len += s.len();
        }
        out.advance(len);
    }
    to.handle_input(to_input, now)
}

/// A CURVE server connection whose handshake with a real client is done, and that client's
/// first MESSAGE already taken (so a replay of it is a replay).
fn curve_server(config: Config, now: Instant) -> Option<Connection> {
    let server_keys = CurveKeys::generate();
    let mut config = config;
    config.mechanism = Mechanism::Curve(CurveConfig::Server {
        keys: server_keys.clone(),
    });
    config.authorize = Some(Authorizer(Arc::new(|_: &[u8; 32]| true)));
    let mut client_config = Config::new(SocketType::Dealer);
    client_config.mechanism = Mechanism::Curve(CurveConfig::Client {
        keys: CurveKeys::generate(),
        server_key: server_keys.public,
    });
    let mut server = Connection::new(config, now);
    let mut client = Connection::new(client_config, now);
    let (mut server_input, mut client_input) = (BytesMut::new(), BytesMut::new());
    for _ in 0..4 {
        shuttle(&mut client, &mut server, &mut server_input, now).ok()?;
        shuttle(&mut server, &mut client, &mut client_input, now).ok()?;
    }
    client.send(&[bytes::Bytes::from_static(b"first")]).ok()?;
    shuttle(&mut client, &mut server, &mut server_input, now).ok()?;
    while server.poll_event().is_some() {}
    server.is_ready().then_some(server)
}

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
    let mut input = BytesMut::new();
    let mut conn = match mode % 3 {
        0 => Connection::new(config, now),
        1 => {
            input.extend_from_slice(&zmtp::greeting::encode(b"NULL", false));
            let mut props = Vec::new();
            zmtp::command::put_property(&mut props, b"Socket-Type", b"DEALER");
            zmtp::command::write(&mut input, b"READY", &props);
            Connection::new(config, now)
        }
        _ => match curve_server(config, now) {
            Some(conn) => conn,
            None => panic!("a CURVE handshake between our own client and server failed"),
        },
    };
    for piece in rest.chunks(usize::from(cut).max(1)) {
        input.extend_from_slice(piece);
        if conn.handle_input(&mut input, now).is_err() {
            assert!(conn.is_closed(), "an error leaves the connection open");
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
