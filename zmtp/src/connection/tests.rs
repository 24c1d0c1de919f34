//! The state machine against itself and against hand-made bytes, with simulated time.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;

/// A connection and the bytes it received but has not consumed yet (a partial greeting).
struct Side {
    conn: Connection,
    input: BytesMut,
}

impl Side {
    fn new(conn: Connection) -> Side {
        Side {
            conn,
            input: BytesMut::new(),
        }
    }
}

impl std::ops::Deref for Side {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl std::ops::DerefMut for Side {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

/// Moves everything `from` has to write into `to`, in pieces of at most `chunk` bytes.
fn shuttle(from: &mut Side, to: &mut Side, chunk: usize, now: Instant) -> Result<()> {
    let mut wire = Vec::new();
    {
        let out = from.outbox();
        let mut slices = [std::io::IoSlice::new(&[]); 64];
        let n = out.io_slices(&mut slices);
        for s in &slices[..n] {
            wire.extend_from_slice(s);
        }
        let len = wire.len();
        out.advance(len);
    }
    for piece in wire.chunks(chunk.max(1)) {
        to.input.extend_from_slice(piece);
        let Side { conn, input } = to;
        conn.handle_input(input, now)?;
    }
    if to.is_ready() {
        assert!(to.input.is_empty(), "whole units are consumed");
    }
    Ok(())
}

fn events(conn: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| conn.poll_event()).collect()
}

fn pair(chunk: usize, now: Instant) -> (Side, Side) {
    let mut dealer_config = Config::new(SocketType::Dealer);
    dealer_config.routing_id = Bytes::from_static(b"dealer-1");
    let mut dealer = Side::new(Connection::new(dealer_config, now));
    let mut router = Side::new(Connection::new(Config::new(SocketType::Router), now));
    for _ in 0..3 {
        shuttle(&mut dealer, &mut router, chunk, now).unwrap();
        shuttle(&mut router, &mut dealer, chunk, now).unwrap();
    }
    assert!(dealer.is_ready() && router.is_ready());
    (dealer, router)
}

#[test]
fn null_handshake_tells_each_side_who_the_other_is() {
    let now = Instant::now();
    let (mut dealer, mut router) = pair(usize::MAX, now);
    let [Event::Ready(peer)] = &events(&mut router)[..] else {
        panic!("one Ready");
    };
    assert_eq!(peer.routing_id.as_ref(), b"dealer-1");
    assert_eq!(peer.socket_type.as_ref(), b"DEALER");
    assert_eq!(peer.minor, 1);
    let [Event::Ready(peer)] = &events(&mut dealer)[..] else {
        panic!("one Ready");
    };
    assert_eq!(peer.socket_type.as_ref(), b"ROUTER");
    assert!(peer.routing_id.is_empty());
}

#[test]
fn messages_of_every_size_cross_whole_even_a_byte_at_a_time() {
    let now = Instant::now();
    for chunk in [1, 7, usize::MAX] {
        let (mut dealer, mut router) = pair(chunk, now);
        events(&mut dealer);
        events(&mut router);
        let sizes = [0usize, 1, 255, 256, 8 * 1024, 64 * 1024];
        let frames: Vec<Bytes> = sizes
            .iter()
            .map(|&n| Bytes::from((0..n).map(|i| i as u8).collect::<Vec<_>>()))
            .collect();
        dealer.send(&frames).unwrap();
        dealer.send(&frames[..1]).unwrap();
        shuttle(&mut dealer, &mut router, chunk, now).unwrap();
        assert_eq!(
            events(&mut router),
            vec![
                Event::Message(frames.clone()),
                Event::Message(frames[..1].to_vec())
            ]
        );
        router.send_frame(&b"back"[..], false).unwrap();
        shuttle(&mut router, &mut dealer, chunk, now).unwrap();
        assert_eq!(
            events(&mut dealer),
            vec![Event::Message(vec![Bytes::from_static(b"back")])]
        );
    }
}

#[test]
fn sending_before_the_handshake_is_refused() {
    let mut conn = Connection::new(Config::new(SocketType::Dealer), Instant::now());
    assert!(matches!(
        conn.send_frame(&b"x"[..], false),
        Err(Error::Unexpected { .. })
    ));
}

/// A peer's greeting with `mechanism`, then its READY with `socket_type`.
fn peer_bytes(mechanism: &[u8], socket_type: &[u8]) -> BytesMut {
    let mut wire = BytesMut::from(&greeting::encode(mechanism, false)[..]);
    let mut data = Vec::new();
    command::put_property(&mut data, b"Socket-Type", socket_type);
    command::write(&mut wire, b"READY", &data);
    wire
}

#[test]
fn the_wrong_mechanism_or_socket_type_is_refused() {
    let now = Instant::now();
    let mut conn = Connection::new(Config::new(SocketType::Router), now);
    let err = conn
        .handle_input(&mut peer_bytes(b"CURVE", b"DEALER"), now)
        .unwrap_err();
    assert!(matches!(err, Error::MechanismMismatch { .. }), "{err}");
    assert!(conn.is_closed());

    let mut conn = Connection::new(Config::new(SocketType::Router), now);
    let err = conn
        .handle_input(&mut peer_bytes(b"NULL", b"PUB"), now)
        .unwrap_err();
    assert!(matches!(err, Error::IncompatibleSocketType { .. }), "{err}");
}

#[test]
fn data_before_ready_and_a_peer_error_end_the_connection() {
    let now = Instant::now();
    let mut wire = BytesMut::from(&greeting::encode(b"NULL", false)[..]);
    frame::write_header(&mut wire, 0, 1);
    wire.extend_from_slice(b"x");
    let mut conn = Connection::new(Config::new(SocketType::Router), now);
    assert!(matches!(
        conn.handle_input(&mut wire, now),
        Err(Error::Unexpected { .. })
    ));

    let mut wire = BytesMut::from(&greeting::encode(b"NULL", false)[..]);
    command::write(&mut wire, b"ERROR", &command::error_data("go away"));
    let mut conn = Connection::new(Config::new(SocketType::Router), now);
    assert_eq!(
        conn.handle_input(&mut wire, now),
        Err(Error::Refused {
            reason: "go away".into()
        })
    );
}

#[test]
fn frames_and_messages_over_the_limit_are_refused() {
    let now = Instant::now();
    let limited = || {
        let mut config = Config::new(SocketType::Router);
        config.max_message_size = 1000;
        Connection::new(config, now)
    };
    // A huge length is refused from the header, with nothing allocated for it.
    let mut wire = peer_bytes(b"NULL", b"DEALER");
    wire.extend_from_slice(&[frame::LONG]);
    wire.extend_from_slice(&u64::MAX.to_be_bytes());
    let mut conn = limited();
    assert!(matches!(
        conn.handle_input(&mut wire, now),
        Err(Error::FrameTooLarge { .. })
    ));
    // Many small frames of one message add up.
    let mut wire = peer_bytes(b"NULL", b"DEALER");
    for _ in 0..100 {
        frame::write_header(&mut wire, frame::MORE, 0);
    }
    let mut conn = limited();
    assert!(matches!(
        conn.handle_input(&mut wire, now),
        Err(Error::MessageTooLarge { limit: 1000 })
    ));
}

#[test]
fn a_handshake_that_does_not_finish_times_out() {
    let start = Instant::now();
    let mut conn = Connection::new(Config::new(SocketType::Dealer), start);
    let deadline = conn.poll_timeout().unwrap();
    assert_eq!(deadline, start + Duration::from_secs(30));
    conn.handle_timeout(deadline - Duration::from_millis(1))
        .unwrap();
    assert_eq!(conn.handle_timeout(deadline), Err(Error::HandshakeTimeout));
    assert!(conn.is_closed());
}

fn heartbeat() -> Heartbeat {
    Heartbeat {
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(3),
        ttl: Duration::from_secs(10),
    }
}

fn beating_pair(now: Instant) -> (Side, Side) {
    let mut dealer_config = Config::new(SocketType::Dealer);
    dealer_config.heartbeat = Some(heartbeat());
    let mut dealer = Side::new(Connection::new(dealer_config, now));
    let mut router = Side::new(Connection::new(Config::new(SocketType::Router), now));
    for _ in 0..3 {
        shuttle(&mut dealer, &mut router, usize::MAX, now).unwrap();
        shuttle(&mut router, &mut dealer, usize::MAX, now).unwrap();
    }
    (dealer, router)
}

#[test]
fn pings_are_sent_on_time_and_answered() {
    let t0 = Instant::now();
    let (mut dealer, mut router) = beating_pair(t0);
    assert_eq!(dealer.poll_timeout(), Some(t0 + Duration::from_secs(1)));
    assert!(dealer.outbox().is_empty());
    let t1 = t0 + Duration::from_secs(1);
    dealer.handle_timeout(t1).unwrap();
    // PING: command flag, size 1+4+2, "PING", TTL 100 tenths.
    let mut slices = [std::io::IoSlice::new(&[]); 4];
    let n = dealer.outbox().io_slices(&mut slices);
    let wire: Vec<u8> = slices[..n].iter().flat_map(|s| s.to_vec()).collect();
    assert_eq!(wire, [4, 7, 4, b'P', b'I', b'N', b'G', 0, 100]);
    // The router answers with a PONG and now expects traffic within the TTL.
    shuttle(&mut dealer, &mut router, usize::MAX, t1).unwrap();
    assert_eq!(router.poll_timeout(), Some(t1 + Duration::from_secs(10)));
    shuttle(&mut router, &mut dealer, usize::MAX, t1).unwrap();
    // The PONG counted as traffic: no timeout pending, the next PING a second later.
    assert_eq!(dealer.poll_timeout(), Some(t1 + Duration::from_secs(1)));
}

#[test]
fn a_silent_peer_is_dead_after_the_timeout_and_after_its_ttl() {
    let t0 = Instant::now();
    let (mut dealer, mut router) = beating_pair(t0);
    // The dealer pings at 1 s, 2 s, 3 s... and hears nothing: dead 3 s after the first.
    for s in 1..4 {
        dealer.handle_timeout(t0 + Duration::from_secs(s)).unwrap();
    }
    assert_eq!(
        dealer.handle_timeout(t0 + Duration::from_secs(4)),
        Err(Error::HeartbeatTimeout)
    );
    // The router got one PING (TTL 10 s) and then silence: dead 10 s later.
    let t1 = t0 + Duration::from_secs(1);
    let mut ping = BytesMut::new();
    command::write(&mut ping, b"PING", &100u16.to_be_bytes());
    router.handle_input(&mut ping, t1).unwrap();
    router
        .handle_timeout(t1 + Duration::from_millis(9_999))
        .unwrap();
    assert_eq!(
        router.handle_timeout(t1 + Duration::from_secs(10)),
        Err(Error::HeartbeatTimeout)
    );
}

proptest! {
    /// Nothing a peer sends makes the state machine panic.
    #[test]
    fn random_bytes_never_panic(junk in proptest::collection::vec(any::<u8>(), 0..512), valid_greeting in any::<bool>()) {
        let now = Instant::now();
        let mut conn = Connection::new(Config::new(SocketType::Router), now);
        let mut input = if valid_greeting {
            peer_bytes(b"NULL", b"DEALER")
        } else {
            BytesMut::new()
        };
        input.extend_from_slice(&junk);
        let _ = conn.handle_input(&mut input, now);
        let _ = conn.handle_timeout(now + Duration::from_secs(60));
    }

    /// However the stream is cut, the same messages come out.
    #[test]
    fn any_cut_of_the_stream_gives_the_same_messages(
        sizes in proptest::collection::vec(0usize..600, 1..8),
        chunk in 1usize..300,
    ) {
        let now = Instant::now();
        let (mut dealer, mut router) = pair(chunk, now);
        events(&mut router);
        let frames: Vec<Bytes> = sizes.iter().map(|&n| Bytes::from(vec![n as u8; n])).collect();
        dealer.send(&frames).unwrap();
        shuttle(&mut dealer, &mut router, chunk, now).unwrap();
        prop_assert_eq!(events(&mut router), vec![Event::Message(frames)]);
    }
}

fn curve_pair(admit: bool, now: Instant) -> (Side, Side, Result<()>) {
    use crate::curve::{CurveConfig, CurveKeys};
    let server_keys = CurveKeys::generate();
    let client_keys = CurveKeys::generate();
    let client_public = client_keys.public;
    let mut server_config = Config::new(SocketType::Router);
    server_config.mechanism = Mechanism::Curve(CurveConfig::Server {
        keys: server_keys.clone(),
    });
    server_config.authorize = Some(Authorizer(std::sync::Arc::new(move |key| {
        admit && *key == client_public
    })));
    let mut client_config = Config::new(SocketType::Dealer);
    client_config.mechanism = Mechanism::Curve(CurveConfig::Client {
        keys: client_keys,
        server_key: server_keys.public,
    });
    let mut client = Side::new(Connection::new(client_config, now));
    let mut server = Side::new(Connection::new(server_config, now));
    let mut outcome = Ok(());
    for _ in 0..4 {
        if let Err(e) = shuttle(&mut client, &mut server, usize::MAX, now)
            .and_then(|()| shuttle(&mut server, &mut client, usize::MAX, now))
        {
            outcome = Err(e);
            break;
        }
    }
    (client, server, outcome)
}

#[test]
fn curve_through_the_connection_encrypts_and_names_the_client() {
    let now = Instant::now();
    let (mut client, mut server, outcome) = curve_pair(true, now);
    outcome.unwrap();
    let [Event::Ready(peer)] = &events(&mut server)[..] else {
        panic!("one Ready");
    };
    assert!(peer.curve_key.is_some());
    events(&mut client);
    let secret = Bytes::from_static(b"not on the wire in clear");
    client.send(&[secret.clone(), Bytes::new()]).unwrap();
    let mut slices = [std::io::IoSlice::new(&[]); 8];
    let n = client.outbox().io_slices(&mut slices);
    let wire: Vec<u8> = slices[..n].iter().flat_map(|s| s.to_vec()).collect();
    assert!(!wire.windows(secret.len()).any(|w| w == &secret[..]));
    shuttle(&mut client, &mut server, 3, now).unwrap();
    assert_eq!(
        events(&mut server),
        vec![Event::Message(vec![secret, Bytes::new()])]
    );
}

#[test]
fn a_curve_server_refuses_a_key_it_does_not_admit_with_an_error_command() {
    let now = Instant::now();
    let (client, server, outcome) = curve_pair(false, now);
    // The server fails with Unauthorized; the client reads its ERROR as a refusal.
    assert_eq!(outcome, Err(Error::Unauthorized));
    assert!(server.is_closed());
    let (mut client, mut server) = (client, server);
    let err = shuttle(&mut server, &mut client, usize::MAX, now).unwrap_err();
    assert!(
        matches!(err, Error::Refused { ref reason } if reason == "400"),
        "{err}"
    );
}

#[test]
fn without_a_limit_a_huge_length_is_still_a_typed_error_and_no_reservation() {
    let now = Instant::now();
    // No limit at all: the length is the peer's word.
    let mut conn = Connection::new(Config::new(SocketType::Router), now);
    let mut wire = peer_bytes(b"NULL", b"DEALER");
    // Before the handshake is done, nothing is reserved for a frame's sake.
    let mut early = wire.clone();
    early.extend_from_slice(&[frame::LONG]);
    early.extend_from_slice(&(1u64 << 40).to_be_bytes());
    assert_eq!(conn.wanted(&early[greeting::LEN..]), 0);
    conn.handle_input(&mut wire, now).unwrap();
    assert!(conn.is_ready());
    let mut huge = BytesMut::new();
    huge.extend_from_slice(&[frame::LONG]);
    huge.extend_from_slice(&(1u64 << 40).to_be_bytes());
    // Ready: room is asked for, but never more than MAX_WANTED at once.
    assert_eq!(conn.wanted(&huge), crate::MAX_WANTED);
    let mut overflow = BytesMut::new();
    overflow.extend_from_slice(&[frame::LONG]);
    overflow.extend_from_slice(&u64::MAX.to_be_bytes());
    assert!(matches!(
        conn.handle_input(&mut overflow, now),
        Err(Error::FrameTooLarge { .. })
    ));
}

#[test]
fn an_identity_over_255_bytes_is_refused() {
    let now = Instant::now();
    let mut wire = BytesMut::from(&greeting::encode(b"NULL", false)[..]);
    let mut data = Vec::new();
    command::put_property(&mut data, b"Socket-Type", b"DEALER");
    command::put_property(&mut data, b"Identity", &[7u8; 256]);
    command::write(&mut wire, b"READY", &data);
    let mut conn = Connection::new(Config::new(SocketType::Router), now);
    assert!(matches!(
        conn.handle_input(&mut wire, now),
        Err(Error::MalformedCommand { .. })
    ));
}

#[test]
fn a_zero_handshake_timeout_is_none_and_a_zero_heartbeat_timeout_never_fires() {
    let now = Instant::now();
    let mut config = Config::new(SocketType::Dealer);
    config.handshake_timeout = Some(Duration::ZERO);
    let conn = Connection::new(config, now);
    assert_eq!(conn.poll_timeout(), None);
    let mut config = Config::new(SocketType::Dealer);
    config.handshake_timeout = Some(Duration::MAX);
    assert_eq!(Connection::new(config, now).poll_timeout(), None);

    let mut dealer_config = Config::new(SocketType::Dealer);
    dealer_config.heartbeat = Some(Heartbeat {
        timeout: Duration::ZERO,
        ..heartbeat()
    });
    let mut dealer = Side::new(Connection::new(dealer_config, now));
    let mut router = Side::new(Connection::new(Config::new(SocketType::Router), now));
    for _ in 0..3 {
        shuttle(&mut dealer, &mut router, usize::MAX, now).unwrap();
        shuttle(&mut router, &mut dealer, usize::MAX, now).unwrap();
    }
    // PINGs go out each second and nobody answers: still alive a minute later.
    for s in 1..60 {
        dealer.handle_timeout(now + Duration::from_secs(s)).unwrap();
    }
    assert!(!dealer.is_closed());
}

/// Everything `side` has to write.
fn drain(side: &mut Side) -> Vec<u8> {
    let out = side.outbox();
    let mut wire = Vec::new();
    let mut slices = [std::io::IoSlice::new(&[]); 64];
    let n = out.io_slices(&mut slices);
    for s in &slices[..n] {
        wire.extend_from_slice(s);
    }
    out.advance(wire.len());
    wire
}

/// A frame of `body` with no flags (as every CURVE MESSAGE travels).
fn message_frame(body: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    frame::write_header(&mut out, 0, body.len());
    out.extend_from_slice(body);
    out.to_vec()
}

proptest! {
    // Each case runs a whole CURVE handshake: 48 cases keep the debug build's test short.
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// After a CURVE handshake, a MESSAGE that is damaged (a bit flipped anywhere after its
    /// name), replayed, rewound to an older nonce, cut short, or made of junk is a typed
    /// error that closes the connection: never a panic, never a message delivered.
    #[test]
    fn damaged_curve_messages_close_the_connection(
        damage in 0u8..5,
        at in any::<proptest::sample::Index>(),
        bit in 0u8..8,
        junk in proptest::collection::vec(any::<u8>(), 0..80),
        cut in any::<proptest::sample::Index>(),
    ) {
        let now = Instant::now();
        let (mut client, mut server, outcome) = curve_pair(true, now);
        outcome.unwrap();
        events(&mut server);
        events(&mut client);
        client.send(&[Bytes::from_static(b"first")]).unwrap();
        let first = drain(&mut client);
        client.send(&[Bytes::from_static(b"the second frame")]).unwrap();
        let second = drain(&mut client);
        // The first arrives as sent.
        let mut input = BytesMut::from(&first[..]);
        server.handle_input(&mut input, now).unwrap();
        prop_assert_eq!(
            events(&mut server),
            vec![Event::Message(vec![Bytes::from_static(b"first")])]
        );

        let header = frame::parse_header(&second, u64::MAX).unwrap().unwrap().header_len;
        let body = &second[header..];
        let bad = match damage {
            // A bit flipped in the nonce, the MAC or the ciphertext.
            0 => {
                let mut bad = second.clone();
                let i = header + 8 + at.index(body.len() - 8);
                bad[i] ^= 1 << bit;
                bad
            }
            // The first MESSAGE again: its nonce is not above the last.
            1 => first.clone(),
            // The second with the first's nonce (a rewound counter; the box no longer
            // opens either).
            2 => {
                let mut rewound = body.to_vec();
                rewound[8..16].copy_from_slice(&first[header + 8..header + 16]);
                message_frame(&rewound)
            }
            // Cut anywhere: shorter than a box and its flags byte, or a box whose
            // ciphertext lost its end.
            3 => message_frame(&body[..cut.index(body.len())]),
            // MESSAGE, a fresh nonce, then junk.
            _ => {
                let mut made = b"\x07MESSAGE".to_vec();
                made.extend_from_slice(&u64::MAX.to_be_bytes());
                made.extend_from_slice(&junk);
                message_frame(&made)
            }
        };
        let mut input = BytesMut::from(&bad[..]);
        let result = server.handle_input(&mut input, now);
        prop_assert!(result.is_err(), "damage {} was taken", damage);
        prop_assert!(server.is_closed());
        prop_assert!(events(&mut server)
            .iter()
            .all(|e| !matches!(e, Event::Message(_))));
        // Nothing more comes through a closed connection, the genuine frame included.
        let mut input = BytesMut::from(&second[..]);
        let _ = server.handle_input(&mut input, now);
        prop_assert!(events(&mut server).is_empty());
    }
}
