//! CurveZMQ against the real libzmq (4.3.4, built with libsodium by the workspace's patched
//! zmq-sys): our handshake and cipher on one side of a loopback TCP connection, a libzmq
//! socket on the other.
//!
//! The tests drive the ZMTP greeting and frames by hand over a blocking `TcpStream`, with
//! the crate's pure functions (`greeting`, `frame`, `command`) and the CURVE state machines.
//!
//! Every blocking read is bounded: the TCP stream has a read timeout and the libzmq sockets
//! a receive timeout of [`TIMEOUT`]. libzmq answers on loopback within milliseconds; when
//! our bytes are wrong it often just waits (for the rest of a frame it thinks is longer, or
//! for a command it never gets), and without a timeout such a bug would hang the test run
//! instead of failing it. Five seconds leaves room for a loaded two-core machine.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use zmtp::command::{self, Command, Properties};
use zmtp::curve::{ClientStep, CurveClient, CurveKeys, CurveServer, ServerStep};
use zmtp::{frame, greeting};

/// The bound on every blocking read (see the module documentation).
const TIMEOUT: Duration = Duration::from_secs(5);

/// libzmq's monitor events and protocol error codes (zmq.h, 4.3.4).
const EVENT_DISCONNECTED: u16 = 0x0200;
const EVENT_HANDSHAKE_SUCCEEDED: u16 = 0x1000;
const EVENT_HANDSHAKE_FAILED_PROTOCOL: u16 = 0x2000;
const EVENT_HANDSHAKE_FAILED_AUTH: u16 = 0x4000;
const PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: u32 = 0x1100_0001;

/// Our end of a ZMTP connection: a blocking TCP stream and the frame functions.
struct Wire {
    stream: TcpStream,
}

impl Wire {
    fn new(stream: TcpStream) -> Wire {
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Wire { stream }
    }

    fn connect(endpoint: &str) -> Wire {
        let addr = endpoint.trim_start_matches("tcp://");
        Wire::new(TcpStream::connect(addr).unwrap())
    }

    /// Sends our CURVE greeting and reads the peer's, which must be CURVE with the other
    /// side's as-server flag.
    fn greet(&mut self, as_server: bool) {
        self.stream
            .write_all(&greeting::encode(b"CURVE", as_server))
            .unwrap();
        let mut theirs = [0u8; greeting::LEN];
        self.stream.read_exact(&mut theirs).unwrap();
        let peer = greeting::parse(&theirs).unwrap().unwrap();
        assert_eq!((peer.major, peer.minor), (3, 1));
        assert_eq!(peer.mechanism_name(), b"CURVE");
        // libzmq 4.3.4 writes zeros after the mechanism's name: its as-server byte is
        // always 0, even for a CURVE server, and it never reads the peer's.
        assert!(!peer.as_server, "libzmq never sets as-server");
    }

    /// Sends a command body (from the CURVE state machines) in a command frame.
    fn send_command(&mut self, body: &[u8]) {
        let mut out = Vec::new();
        frame::write_header(&mut out, frame::COMMAND, body.len());
        out.extend_from_slice(body);
        self.stream.write_all(&out).unwrap();
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Reads one frame: (outer flags, body).
    fn read_frame(&mut self) -> io::Result<(u8, BytesMut)> {
        let mut header = [0u8; frame::MAX_HEADER];
        self.stream.read_exact(&mut header[..2])?;
        if header[0] & frame::LONG != 0 {
            self.stream.read_exact(&mut header[2..])?;
        }
        let header = frame::parse_header(&header, 1 << 24)
            .unwrap()
            .expect("a whole header");
        let mut body = BytesMut::zeroed(header.body_len as usize);
        self.stream.read_exact(&mut body)?;
        Ok((header.flags, body))
    }

    /// Reads one handshake command frame's body.
    fn read_command(&mut self) -> BytesMut {
        let (flags, body) = self.read_frame().unwrap();
        assert_eq!(
            flags & !frame::LONG,
            frame::COMMAND,
            "a handshake command frame"
        );
        body
    }

    /// Whether the peer closed the connection (EOF or reset) before sending anything more.
    fn closed_by_peer(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
            ),
        }
    }
}

/// ZMTP properties as libzmq's sockets send them.
fn metadata(socket_type: &[u8], identity: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    command::put_property(&mut out, b"Socket-Type", socket_type);
    if let Some(identity) = identity {
        command::put_property(&mut out, b"Identity", identity);
    }
    out
}

/// A libzmq socket with the test's timeouts and no linger.
fn socket(ctx: &zmq::Context, kind: zmq::SocketType) -> zmq::Socket {
    let socket = ctx.socket(kind).unwrap();
    socket.set_linger(0).unwrap();
    socket.set_rcvtimeo(TIMEOUT.as_millis() as i32).unwrap();
    socket.set_sndtimeo(TIMEOUT.as_millis() as i32).unwrap();
    socket
}

/// A monitor of `socket`'s events on a PAIR socket.
fn monitor(ctx: &zmq::Context, socket: &zmq::Socket, name: &str, events: u16) -> zmq::Socket {
    let endpoint = format!("inproc://monitor-{name}");
    socket.monitor(&endpoint, i32::from(events)).unwrap();
    let mon = self::socket(ctx, zmq::PAIR);
    mon.connect(&endpoint).unwrap();
    mon
}

/// Waits for `event` on a monitor: its value. The first frame of a monitor message is the
/// event (u16) and its value (u32), native-endian; the second the endpoint. Parsed by hand:
/// `zmq::SocketEvent::from_raw` panics on events it does not know.
fn wait_event(mon: &zmq::Socket, event: u16) -> u32 {
    wait_event_after(mon, event).0
}

/// As [`wait_event`], with the events (event, value) that came before it.
fn wait_event_after(mon: &zmq::Socket, event: u16) -> (u32, Vec<(u16, u32)>) {
    let mut seen = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while Instant::now() < deadline {
        let Ok(parts) = mon.recv_multipart(0) else {
            break;
        };
        let head = &parts[0];
        let got = u16::from_ne_bytes([head[0], head[1]]);
        let value = u32::from_ne_bytes([head[2], head[3], head[4], head[5]]);
        if got == event {
            return (value, seen);
        }
        seen.push((got, value));
    }
    panic!("no event {event:#x} within {TIMEOUT:?}; saw {seen:x?}");
}

/// Accepts one connection within [`TIMEOUT`].
fn accept(listener: &TcpListener) -> Wire {
    accept_within(listener, TIMEOUT).unwrap_or_else(|| panic!("no connection within {TIMEOUT:?}"))
}

/// Accepts one connection if one comes within `wait`.
fn accept_within(listener: &TcpListener, wait: Duration) -> Option<Wire> {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + wait;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                return Some(Wire::new(stream));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// A libzmq ROUTER as CURVE server on an ephemeral port: (socket, endpoint, its public key).
fn libzmq_curve_router(ctx: &zmq::Context) -> (zmq::Socket, String, [u8; 32]) {
    let keys = zmq::CurveKeyPair::new().unwrap();
    let router = socket(ctx, zmq::ROUTER);
    router.set_curve_server(true).unwrap();
    router.set_curve_secretkey(&keys.secret_key).unwrap();
    router.bind("tcp://127.0.0.1:*").unwrap();
    let endpoint = router.get_last_endpoint().unwrap().unwrap();
    (router, endpoint, keys.public_key)
}

/// Our client's whole handshake over `wire`: the cipher and the server's properties.
fn client_handshake(
    wire: &mut Wire,
    keys: &CurveKeys,
    server_key: [u8; 32],
    md: &[u8],
) -> (zmtp::curve::Cipher, Properties) {
    let mut client = CurveClient::new(keys, server_key).unwrap();
    wire.greet(false);
    wire.send_command(&client.hello());
    let welcome = wire.read_command();
    let ClientStep::Send(initiate) = client.on_command(&welcome, md).unwrap() else {
        panic!("WELCOME must be answered with INITIATE");
    };
    wire.send_command(&initiate);
    let ready = wire.read_command();
    let ClientStep::Ready { properties } = client.on_command(&ready, md).unwrap() else {
        panic!("READY must end the handshake");
    };
    (
        client.into_cipher(),
        Properties::parse(&properties).unwrap(),
    )
}

/// (a) Our client, libzmq's ROUTER as the CURVE server: the handshake, a multipart message
/// echoed, PING answered by PONG under CURVE, and libzmq's framing checked on what it sends.
#[test]
fn our_client_talks_to_a_libzmq_curve_router() {
    let ctx = zmq::Context::new();
    let (router, endpoint, server_key) = libzmq_curve_router(&ctx);
    let mon = monitor(&ctx, &router, "a", EVENT_HANDSHAKE_SUCCEEDED);
    // The ROUTER echoes two messages (routing id first) and hands back what it received.
    let echo = thread::spawn(move || {
        let mut received = Vec::new();
        for _ in 0..2 {
            let parts = router.recv_multipart(0).unwrap();
            router.send_multipart(&parts, 0).unwrap();
            received.push(parts);
        }
        (router, received)
    });

    let keys = CurveKeys::generate();
    let mut wire = Wire::connect(&endpoint);
    let md = metadata(b"DEALER", Some(b"our-client"));
    let (mut cipher, props) = client_handshake(&mut wire, &keys, server_key, &md);
    assert_eq!(props.get("Socket-Type").unwrap().as_ref(), b"ROUTER");
    wait_event(&mon, EVENT_HANDSHAKE_SUCCEEDED);

    // A multipart message with an empty frame and a 64 KiB one (long frames both ways).
    let big = vec![0x5Au8; 64 * 1024];
    let frames: [&[u8]; 4] = [b"first", b"", &big, b"last"];
    let mut out = BytesMut::new();
    for (i, f) in frames.iter().enumerate() {
        cipher.encrypt(i + 1 < frames.len(), &[f], &mut out);
    }
    wire.send_raw(&out);

    for (i, f) in frames.iter().enumerate() {
        let (flags, body) = wire.read_frame().unwrap();
        // libzmq's MESSAGE frames: no MORE, no COMMAND on the outer frame.
        assert_eq!(flags & !frame::LONG, 0, "frame {i}'s outer flags");
        let got = cipher.decrypt_owned(flags, body).unwrap();
        assert_eq!(got.payload.as_ref(), *f, "frame {i}");
        assert_eq!(got.more, i + 1 < frames.len(), "frame {i}'s MORE");
        assert!(!got.command);
    }

    // libzmq ORs the outer frame's MORE into the frame's flags: two single-frame messages,
    // the first with MORE on its outer frame only, arrive as one message of two frames.
    // (Why our decrypt refuses outer flags: the outer bits are not ignored.)
    let mut out = BytesMut::new();
    cipher.encrypt(false, &[b"a"], &mut out);
    out[0] |= frame::MORE;
    cipher.encrypt(false, &[b"b"], &mut out);
    wire.send_raw(&out);
    for (want, more) in [(&b"a"[..], true), (&b"b"[..], false)] {
        let (flags, body) = wire.read_frame().unwrap();
        let got = cipher.decrypt(flags, &body).unwrap();
        assert_eq!((got.payload.as_ref(), got.more), (want, more));
    }

    let (_router, received) = echo.join().unwrap();
    // The ROUTER took our Identity property (from INITIATE's metadata) as the routing id.
    assert_eq!(received[0][0], b"our-client");
    assert_eq!(received[0].len(), 1 + frames.len());
    assert_eq!(received[1], [&b"our-client"[..], b"a", b"b"]);

    // PING under CURVE: a MESSAGE with the inner COMMAND flag. libzmq answers PONG the
    // same way, with our context.
    let ping = command::body(b"PING", b"\x00\x0actx-1");
    let mut out = BytesMut::new();
    cipher.encrypt_command(&[&ping], &mut out);
    wire.send_raw(&out);
    let (flags, body) = wire.read_frame().unwrap();
    assert_eq!(flags, 0, "libzmq's PONG is a MESSAGE with no outer flags");
    let pong = cipher.decrypt(flags, &body).unwrap();
    assert!(pong.command && !pong.more);
    let cmd = Command::parse(&pong.payload).unwrap();
    assert_eq!((cmd.name, cmd.data), (&b"PONG"[..], &b"ctx-1"[..]));

    // A PING in plain text after the CURVE handshake is not a MESSAGE: libzmq closes.
    let mut out = Vec::new();
    command::write(&mut out, b"PING", b"\x00\x00");
    wire.send_raw(&out);
    assert!(
        wire.closed_by_peer(),
        "libzmq must close on a plain-text PING"
    );
}

/// (b) libzmq's DEALER as the CURVE client, our server: the handshake (the client key we
/// learn is libzmq's), messages both ways, and libzmq's heartbeat PING under CURVE.
#[test]
fn a_libzmq_curve_dealer_talks_to_our_server() {
    let ctx = zmq::Context::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server_keys = CurveKeys::generate();
    let client_keys = zmq::CurveKeyPair::new().unwrap();

    let dealer = socket(&ctx, zmq::DEALER);
    dealer.set_curve_serverkey(&server_keys.public).unwrap();
    dealer.set_curve_publickey(&client_keys.public_key).unwrap();
    dealer.set_curve_secretkey(&client_keys.secret_key).unwrap();
    dealer.set_identity(b"libzmq-dealer").unwrap();
    // Heartbeats every 100 ms, so PINGs come during the test.
    dealer.set_heartbeat_ivl(100).unwrap();
    dealer.set_heartbeat_ttl(2000).unwrap();
    dealer.connect(&format!("tcp://127.0.0.1:{port}")).unwrap();

    let mut wire = accept(&listener);
    wire.greet(true);
    let mut server = CurveServer::new(&server_keys);
    let hello = wire.read_command();
    assert_eq!(hello.len(), 200);
    let ServerStep::Send(welcome) = server.on_command(&hello).unwrap() else {
        panic!("HELLO must be answered with WELCOME");
    };
    wire.send_command(&welcome);
    let initiate = wire.read_command();
    let ServerStep::Authorize {
        client_key,
        properties,
    } = server.on_command(&initiate).unwrap()
    else {
        panic!("INITIATE must ask for authorization");
    };
    assert_eq!(
        client_key, client_keys.public_key,
        "the client key libzmq holds"
    );
    let props = Properties::parse(&properties).unwrap();
    assert_eq!(props.get("Socket-Type").unwrap().as_ref(), b"DEALER");
    assert_eq!(props.get("Identity").unwrap().as_ref(), b"libzmq-dealer");
    wire.send_command(&server.ready(&metadata(b"ROUTER", None)));
    let mut cipher = server.into_cipher();

    // DEALER -> us, skipping (and answering) heartbeats.
    let big = vec![7u8; 64 * 1024];
    let sent: Vec<&[u8]> = vec![b"request", b"", &big];
    dealer.send_multipart(&sent, 0).unwrap();
    let mut pings = 0;
    let mut got = Vec::new();
    while got.len() < sent.len() {
        let (flags, body) = wire.read_frame().unwrap();
        assert_eq!(flags & !frame::LONG, 0, "libzmq's outer flags");
        let frame = cipher.decrypt(flags, &body).unwrap();
        if frame.command {
            pings += answer_ping(&mut wire, &mut cipher, &frame.payload);
            continue;
        }
        got.push(frame);
    }
    for (i, (frame, want)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(frame.payload.as_ref(), *want, "frame {i}");
        assert_eq!(frame.more, i + 1 < sent.len(), "frame {i}'s MORE");
    }

    // Us -> DEALER: a multipart reply.
    let reply: [&[u8]; 3] = [b"reply", b"", &big[..300]];
    let mut out = BytesMut::new();
    for (i, f) in reply.iter().enumerate() {
        cipher.encrypt(i + 1 < reply.len(), &[f], &mut out);
    }
    wire.send_raw(&out);
    let received = dealer.recv_multipart(0).unwrap();
    assert_eq!(
        received,
        reply.iter().map(|f| f.to_vec()).collect::<Vec<_>>()
    );

    // libzmq's heartbeat: a MESSAGE (outer flags 0) with the inner COMMAND flag whose
    // payload is "\x04PING" and the TTL (2000 ms = 20 tenths). Our PONG must open at
    // libzmq (it closes the connection on a box that does not), so one more round trip
    // after the PONGs proves it did.
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline || pings == 0 {
        let (flags, body) = wire.read_frame().unwrap();
        assert_eq!(flags, 0);
        let frame = cipher.decrypt(flags, &body).unwrap();
        assert!(frame.command, "only heartbeats are due now");
        pings += answer_ping(&mut wire, &mut cipher, &frame.payload);
    }
    assert!(pings > 0);
    let mut out = BytesMut::new();
    cipher.encrypt(false, &[b"still here"], &mut out);
    wire.send_raw(&out);
    assert_eq!(dealer.recv_bytes(0).unwrap(), b"still here");
}

/// Answers a PING (the payload of a decrypted command frame) with an encrypted PONG: 1, or
/// 0 for another command.
fn answer_ping(wire: &mut Wire, cipher: &mut zmtp::curve::Cipher, payload: &[u8]) -> usize {
    let cmd = Command::parse(payload).unwrap();
    if cmd.name != b"PING" {
        return 0;
    }
    assert_eq!(
        &cmd.data[..2],
        &20u16.to_be_bytes(),
        "the TTL in tenths of a second"
    );
    let pong = command::body(b"PONG", &cmd.data[2..]);
    let mut out = BytesMut::new();
    cipher.encrypt_command(&[&pong], &mut out);
    wire.send_raw(&out);
    1
}

/// (c) Our client with the wrong server key: libzmq's server cannot open HELLO, reports
/// HANDSHAKE_FAILED_PROTOCOL (ZMTP_CRYPTOGRAPHIC) on its monitor, and closes the
/// connection without an ERROR.
#[test]
fn a_libzmq_server_refuses_a_client_with_the_wrong_server_key() {
    let ctx = zmq::Context::new();
    let (router, endpoint, _server_key) = libzmq_curve_router(&ctx);
    let mon = monitor(&ctx, &router, "c", EVENT_HANDSHAKE_FAILED_PROTOCOL);

    let keys = CurveKeys::generate();
    let mut client = CurveClient::new(&keys, CurveKeys::generate().public).unwrap();
    let mut wire = Wire::connect(&endpoint);
    wire.greet(false);
    wire.send_command(&client.hello());
    assert!(wire.closed_by_peer(), "libzmq closes instead of WELCOME");
    assert_eq!(
        wait_event(&mon, EVENT_HANDSHAKE_FAILED_PROTOCOL),
        PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
    );
}

/// (d) Our server refusing the client's key with ERROR. With the reason "400" (a ZAP status
/// code, what libzmq's own server sends) libzmq's client reports HANDSHAKE_FAILED_AUTH with
/// value 400, then DISCONNECTED; with any other reason only DISCONNECTED. Either way it
/// treats ERROR as a protocol error and does not reconnect to that endpoint (libzmq 4.3.4's
/// `session_base_t::engine_error` terminates the session on a protocol error; only a
/// connection error, such as a server that closes without ERROR, makes it retry).
#[test]
fn our_server_refuses_a_libzmq_client() {
    let ctx = zmq::Context::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server_keys = CurveKeys::generate();

    for (name, reason, auth_event) in [("d400", "400", Some(400)), ("dtext", "not allowed", None)] {
        let client_keys = zmq::CurveKeyPair::new().unwrap();
        let dealer = socket(&ctx, zmq::DEALER);
        dealer.set_curve_serverkey(&server_keys.public).unwrap();
        dealer.set_curve_publickey(&client_keys.public_key).unwrap();
        dealer.set_curve_secretkey(&client_keys.secret_key).unwrap();
        let mon = monitor(
            &ctx,
            &dealer,
            name,
            EVENT_HANDSHAKE_FAILED_AUTH | EVENT_HANDSHAKE_FAILED_PROTOCOL | EVENT_DISCONNECTED,
        );
        dealer.connect(&format!("tcp://127.0.0.1:{port}")).unwrap();

        let mut wire = accept(&listener);
        wire.greet(true);
        let mut server = CurveServer::new(&server_keys);
        let ServerStep::Send(welcome) = server.on_command(&wire.read_command()).unwrap() else {
            panic!("HELLO must be answered with WELCOME");
        };
        wire.send_command(&welcome);
        let ServerStep::Authorize { client_key, .. } =
            server.on_command(&wire.read_command()).unwrap()
        else {
            panic!("INITIATE must ask for authorization");
        };
        assert_eq!(client_key, client_keys.public_key);
        wire.send_command(&server.refuse(reason));
        // libzmq closes once it has read the ERROR.
        assert!(wire.closed_by_peer(), "libzmq closes after ERROR");

        let (_, before) = wait_event_after(&mon, EVENT_DISCONNECTED);
        let auth: Vec<u32> = before
            .iter()
            .filter(|(event, _)| *event == EVENT_HANDSHAKE_FAILED_AUTH)
            .map(|&(_, value)| value)
            .collect();
        assert_eq!(
            auth,
            auth_event.into_iter().collect::<Vec<_>>(),
            "reason {reason:?}"
        );
        assert!(
            !before
                .iter()
                .any(|(event, _)| *event == EVENT_HANDSHAKE_FAILED_PROTOCOL),
            "ERROR is reported as a refusal, not a protocol failure: {before:x?}"
        );
        // No reconnection: libzmq's reconnect interval is 100 ms, so a second and more would
        // show within a second.
        assert!(
            accept_within(&listener, Duration::from_secs(1)).is_none(),
            "libzmq reconnected after ERROR {reason:?}"
        );
    }
}

/// A MESSAGE boxed for another connection: libzmq cannot open it and closes, so it checks
/// our boxes rather than trusting them.
#[test]
fn libzmq_closes_on_a_message_from_another_session() {
    let ctx = zmq::Context::new();
    let (_router, endpoint, server_key) = libzmq_curve_router(&ctx);
    let keys = CurveKeys::generate();
    let md = metadata(b"DEALER", Some(b""));
    let mut first = Wire::connect(&endpoint);
    let (mut first_cipher, _) = client_handshake(&mut first, &keys, server_key, &md);
    let mut second = Wire::connect(&endpoint);
    let (_second_cipher, _) = client_handshake(&mut second, &keys, server_key, &md);
    let mut out = BytesMut::new();
    first_cipher.encrypt(false, &[b"wrong session"], &mut out);
    second.send_raw(&out);
    assert!(
        second.closed_by_peer(),
        "libzmq must close on a box it cannot open"
    );
}
