//! One ZMTP connection as a state machine: the greeting, the handshake, then frames.
//!
//! Inputs are [`Connection::handle_input`] (bytes read) and [`Connection::handle_timeout`]
//! (the clock passed [`Connection::poll_timeout`]); outputs are [`Connection::poll_event`]
//! (the peer is ready, a message) and [`Connection::outbox`] (bytes to write). Time is
//! always an argument, so the tests run it with simulated time.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};

use crate::command::{self, Command, Properties};
use crate::curve::{Cipher, ClientStep, CurveClient, CurveConfig, CurveServer, ServerStep};
use crate::error::{Error, Result};
use crate::frame;
use crate::greeting;
use crate::outbox::{Outbox, ZERO_COPY_MIN};

/// The ZMTP socket types this core speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketType {
    /// ROUTER: many peers, each message tagged with the peer's routing id.
    Router,
    /// DEALER: messages to and from whichever peer, no envelope.
    Dealer,
}

impl SocketType {
    /// The name in READY's `Socket-Type` property.
    pub fn name(self) -> &'static str {
        match self {
            SocketType::Router => "ROUTER",
            SocketType::Dealer => "DEALER",
        }
    }

    /// Whether a peer of type `peer` may talk to this one (ZMTP 3.1's table: a ROUTER takes
    /// DEALER, REQ and ROUTER; a DEALER takes REP, DEALER and ROUTER).
    pub fn accepts(self, peer: &[u8]) -> bool {
        let ok: &[&[u8]] = match self {
            SocketType::Router => &[b"DEALER", b"REQ", b"ROUTER"],
            SocketType::Dealer => &[b"REP", b"DEALER", b"ROUTER"],
        };
        ok.iter().any(|name| peer.eq_ignore_ascii_case(name))
    }
}

/// The security mechanism of a connection.
#[derive(Debug, Clone, Default)]
pub enum Mechanism {
    /// No security (RFC 23's NULL): the greeting, then READY both ways.
    #[default]
    Null,
    /// CurveZMQ (RFC 26): every frame encrypted and authenticated, the server knowing the
    /// client's long-term key.
    Curve(CurveConfig),
}

impl Mechanism {
    /// The name in the greeting.
    fn name(&self) -> &'static [u8] {
        match self {
            Mechanism::Null => b"NULL",
            Mechanism::Curve(_) => b"CURVE",
        }
    }

    /// The greeting's as-server flag (RFC 26: set by the CURVE server; libzmq neither sets
    /// nor reads it, so it is never checked).
    fn as_server(&self) -> bool {
        matches!(self, Mechanism::Curve(CurveConfig::Server { .. }))
    }
}

/// Decides whether a CURVE client's long-term public key may connect (a server's
/// allow-list). A pure function of the key: the connection asks it once, after INITIATE.
#[derive(Clone)]
pub struct Authorizer(pub Arc<AuthorizeFn>);

/// The function an [`Authorizer`] holds: whether a client key may connect.
pub type AuthorizeFn = dyn Fn(&[u8; 32]) -> bool + Send + Sync;

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authorizer")
    }
}

/// ZMTP 3.1 heartbeats: PING every `interval`; the connection is dead when nothing came
/// within `timeout` of a PING sent; our PINGs ask the peer to give up on us after `ttl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// Time between PINGs.
    pub interval: Duration,
    /// How long after a PING without any traffic back the connection is dead.
    pub timeout: Duration,
    /// The time to live our PINGs announce (sent in tenths of a second, at most 6553.5 s).
    pub ttl: Duration,
}

/// What a connection is set up with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Our socket type, sent in READY and checked against the peer's.
    pub socket_type: SocketType,
    /// Our routing id, sent as READY's `Identity` (empty for none: the peer picks one).
    pub routing_id: Bytes,
    /// The security mechanism.
    pub mechanism: Mechanism,
    /// The largest frame accepted, and the largest message (the sum of its frames, each
    /// counted with [`FRAME_OVERHEAD`] more bytes, so that a stream of empty frames is
    /// bounded too). `u64::MAX` for no limit.
    pub max_message_size: u64,
    /// Heartbeats, if any.
    pub heartbeat: Option<Heartbeat>,
    /// How long the greeting and the handshake may take.
    pub handshake_timeout: Option<Duration>,
    /// A CURVE server's admission of client keys; `None` admits every client that completes
    /// the handshake.
    pub authorize: Option<Authorizer>,
}

impl Config {
    /// A NULL connection of `socket_type` with no routing id, no heartbeats, no size limit and
    /// a 30 s handshake timeout (libzmq's default).
    pub fn new(socket_type: SocketType) -> Config {
        Config {
            socket_type,
            routing_id: Bytes::new(),
            mechanism: Mechanism::Null,
            max_message_size: u64::MAX,
            heartbeat: None,
            handshake_timeout: Some(Duration::from_secs(30)),
            authorize: None,
        }
    }
}

/// What a message costs beyond its bytes when counted against the size limit: about one
/// `Bytes` handle per frame.
pub const FRAME_OVERHEAD: u64 = 32;

/// The largest gathering buffer CURVE keeps between frames.
const MAX_SCRATCH: usize = 256 * 1024;

/// The most [`Connection::wanted`] asks room for at once.
pub const MAX_WANTED: usize = 8 * 1024 * 1024;

/// The longest routing id a peer may announce (ZMTP's routing ids are 1 to 255 bytes).
pub const MAX_ROUTING_ID: usize = 255;

/// Who the peer is, once its handshake is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its `Socket-Type`.
    pub socket_type: Bytes,
    /// Its `Identity` (empty when it sent none).
    pub routing_id: Bytes,
    /// All its properties.
    pub properties: Properties,
    /// Its long-term CURVE public key (CURVE servers learn the client's).
    pub curve_key: Option<[u8; 32]>,
    /// The ZMTP minor version it speaks (0: no heartbeats).
    pub minor: u8,
}

/// What a connection reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake is done: messages may flow both ways.
    Ready(Peer),
    /// A whole message, its frames in order.
    Message(Vec<Bytes>),
}

/// One outbound frame: copied into the outbox, or queued as it is when it is large and
/// already a `Bytes`.
pub trait Payload {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// Whether the payload is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Writes the payload into `out`, exactly [`len`](Self::len) bytes.
    fn write_to(&self, out: &mut [u8]);
    /// The payload as a `Bytes` of its own, when it is one (so a large frame is not copied).
    fn to_bytes(&self) -> Option<Bytes> {
        None
    }
}

impl Payload for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    fn write_to(&self, out: &mut [u8]) {
        out.copy_from_slice(self);
    }
}

impl Payload for Bytes {
    fn len(&self) -> usize {
        Bytes::len(self)
    }
    fn write_to(&self, out: &mut [u8]) {
        out.copy_from_slice(self);
    }
    fn to_bytes(&self) -> Option<Bytes> {
        Some(self.clone())
    }
}

/// Where the handshake is.
#[derive(Debug)]
enum State {
    /// Waiting for the peer's greeting (ours is queued at the start).
    Greeting,
    /// NULL: our READY is queued; waiting for the peer's.
    NullReady,
    /// CURVE client: HELLO sent; WELCOME, then READY, to come.
    CurveClient(Box<CurveClient>),
    /// CURVE server: waiting for HELLO, then INITIATE.
    CurveServer(Box<CurveServer>),
    /// Messages flow.
    Ready,
    /// Failed or closed: nothing more goes in or out.
    Closed,
}

/// One connection's ZMTP state machine.
#[derive(Debug)]
pub struct Connection {
    config: Config,
    state: State,
    out: Outbox,
    events: VecDeque<Event>,
    /// Frames of the message being received.
    parts: Vec<Bytes>,
    /// Their size as counted against the limit.
    parts_size: u64,
    /// The peer's minor version, from its greeting.
    peer_minor: u8,
    /// Until when the handshake may run.
    handshake_deadline: Option<Instant>,
    /// When the next PING goes out (heartbeats on and the peer speaks ZMTP 3.1).
    next_ping: Option<Instant>,
    /// The first PING sent since anything last came in.
    ping_unanswered_since: Option<Instant>,
    /// When something last came in.
    last_input: Instant,
    /// The time to live the peer's PINGs asked for.
    peer_ttl: Option<Duration>,
    /// Whether the rest of our greeting went out.
    greeting_rest: bool,
    /// CURVE after the handshake: every frame goes through it.
    cipher: Option<Box<Cipher>>,
    /// Where a frame is gathered before CURVE encrypts it.
    scratch: Vec<u8>,
}

impl Connection {
    /// A connection that has just been opened at `now`: our greeting is queued.
    pub fn new(config: Config, now: Instant) -> Connection {
        let mut out = Outbox::default();
        let ours = greeting::encode(config.mechanism.name(), config.mechanism.as_server());
        // The signature and the major version now, the rest once the peer's arrive (see
        // `greeting_rest`).
        out.tail().extend_from_slice(&ours[..greeting::VERSIONED]);
        Connection {
            // Zero means no timeout (as libzmq's ZMQ_HANDSHAKE_IVL); so does one past the
            // end of time.
            handshake_deadline: config
                .handshake_timeout
                .filter(|t| !t.is_zero())
                .and_then(|t| now.checked_add(t)),
            config,
            state: State::Greeting,
            out,
            events: VecDeque::new(),
            parts: Vec::new(),
            parts_size: 0,
            peer_minor: 0,
            next_ping: None,
            ping_unanswered_since: None,
            last_input: now,
            peer_ttl: None,
            greeting_rest: false,
            cipher: None,
            scratch: Vec::new(),
        }
    }

    /// Whether the handshake is done and messages may be sent.
    pub fn is_ready(&self) -> bool {
        matches!(self.state, State::Ready)
    }

    /// Whether the connection failed or was closed.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// The bytes to write, in order. The driver writes what it can and
    /// [`advance`](Outbox::advance)s past it.
    pub fn outbox(&mut self) -> &mut Outbox {
        &mut self.out
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// How many bytes the frame being received still needs beyond what `input` holds, so
    /// the driver can make room for a large frame in one step (bounded by the size limit,
    /// which its header was checked against).
    ///
    /// Nothing before the handshake is done (its frames are small, and an unauthenticated
    /// peer must not make us reserve memory), and at most [`MAX_WANTED`] at a time: a larger
    /// frame grows the buffer step by step as its bytes arrive.
    pub fn wanted(&self, input: &[u8]) -> usize {
        if !self.is_ready() {
            return 0;
        }
        match frame::parse_header(input, self.config.max_message_size) {
            Ok(Some(h)) => {
                let whole = (h.header_len as u64).saturating_add(h.body_len);
                let missing = whole.saturating_sub(input.len() as u64);
                usize::try_from(missing.min(MAX_WANTED as u64)).unwrap_or(0)
            }
            _ => 0,
        }
    }

    /// Takes the bytes the peer sent: consumes from `input` everything that forms whole
    /// units (the greeting, frames) and leaves a partial one for the next call. An error
    /// closes the connection; the driver should write what is queued (an ERROR, maybe) and
    /// hang up.
    pub fn handle_input(&mut self, input: &mut BytesMut, now: Instant) -> Result<()> {
        if input.is_empty() {
            return Ok(());
        }
        self.last_input = now;
        self.ping_unanswered_since = None;
        let result = self.consume(input, now);
        if result.is_err() {
            self.state = State::Closed;
        }
        result
    }

    fn consume(&mut self, input: &mut BytesMut, now: Instant) -> Result<()> {
        loop {
            match self.state {
                State::Closed => return Ok(()),
                State::Greeting => {
                    let partial = greeting::parse(input)?;
                    // As libzmq: our mechanism goes out once the peer's signature and major
                    // version are in. A libzmq server that finds our mechanism wrong closes
                    // in the same breath, before it writes the rest of its own greeting; sent
                    // this way, its greeting is on the wire before ours has reached it, and
                    // we can tell a refusal from a peer that went away.
                    if !self.greeting_rest && input.len() >= greeting::VERSIONED {
                        self.greeting_rest = true;
                        let ours = greeting::encode(
                            self.config.mechanism.name(),
                            self.config.mechanism.as_server(),
                        );
                        self.out
                            .tail()
                            .extend_from_slice(&ours[greeting::VERSIONED..]);
                    }
                    let Some(theirs) = partial else {
                        return Ok(());
                    };
                    input.advance(greeting::LEN);
                    self.on_greeting(theirs)?;
                }
                _ => {
                    let Some(header) = frame::parse_header(input, self.config.max_message_size)?
                    else {
                        return Ok(());
                    };
                    // Without a limit the length is the peer's word: an overflow is a frame
                    // no buffer can hold.
                    let whole = (header.header_len as u64)
                        .checked_add(header.body_len)
                        .filter(|&w| usize::try_from(w).is_ok())
                        .ok_or(Error::FrameTooLarge {
                            size: header.body_len,
                            limit: self.config.max_message_size,
                        })?;
                    if (input.len() as u64) < whole {
                        return Ok(());
                    }
                    input.advance(header.header_len);
                    // The header was checked against the limit, so the length fits.
                    let body = input.split_to(header.body_len as usize);
                    if let Some(cipher) = self.cipher.as_mut() {
                        let frame = cipher.decrypt_owned(header.flags, body)?;
                        if frame.command {
                            self.on_command(&frame.payload, now)?;
                        } else {
                            self.on_data(frame.more, frame.payload)?;
                        }
                    } else if header.command() {
                        self.on_command(&body, now)?;
                    } else {
                        self.on_data(header.more(), body.freeze())?;
                    }
                }
            }
        }
    }

    fn on_greeting(&mut self, theirs: greeting::Greeting) -> Result<()> {
        let ours = self.config.mechanism.name();
        if theirs.mechanism_name() != ours {
            return Err(Error::MechanismMismatch {
                ours: String::from_utf8_lossy(ours).into_owned(),
                theirs: String::from_utf8_lossy(theirs.mechanism_name()).into_owned(),
            });
        }
        self.peer_minor = theirs.minor;
        match &self.config.mechanism {
            Mechanism::Null => {
                let data = self.metadata();
                self.push_command(b"READY", &data);
                self.state = State::NullReady;
            }
            Mechanism::Curve(CurveConfig::Client { keys, server_key }) => {
                let mut client = CurveClient::new(keys, *server_key)?;
                let hello = client.hello();
                self.push_command_body(&hello);
                self.state = State::CurveClient(Box::new(client));
            }
            Mechanism::Curve(CurveConfig::Server { keys }) => {
                self.state = State::CurveServer(Box::new(CurveServer::new(keys)));
            }
        }
        Ok(())
    }

    /// Our properties: `Socket-Type` and `Identity` (what libzmq sends a ROUTER or DEALER).
    fn metadata(&self) -> Vec<u8> {
        let mut data = Vec::with_capacity(32 + self.config.routing_id.len());
        command::put_property(
            &mut data,
            b"Socket-Type",
            self.config.socket_type.name().as_bytes(),
        );
        command::put_property(&mut data, b"Identity", &self.config.routing_id);
        data
    }

    /// A handshake command of CURVE's, as it came (name-size, name, data).
    fn on_curve_command(&mut self, body: &[u8], now: Instant) -> Result<()> {
        let metadata = self.metadata();
        match &mut self.state {
            State::CurveClient(client) => match client.on_command(body, &metadata)? {
                ClientStep::Send(initiate) => {
                    self.push_command_body(&initiate);
                    Ok(())
                }
                ClientStep::Ready { properties } => {
                    let properties = Properties::parse(&properties)?;
                    let State::CurveClient(client) =
                        std::mem::replace(&mut self.state, State::Closed)
                    else {
                        unreachable!("matched above")
                    };
                    self.cipher = Some(Box::new(client.into_cipher()));
                    self.become_ready(properties, None, now)
                }
            },
            State::CurveServer(server) => match server.on_command(body)? {
                ServerStep::Send(welcome) => {
                    self.push_command_body(&welcome);
                    Ok(())
                }
                ServerStep::Authorize {
                    client_key,
                    properties,
                } => {
                    let admitted = self
                        .config
                        .authorize
                        .as_ref()
                        .is_none_or(|authorize| (authorize.0)(&client_key));
                    if !admitted {
                        // "400", as a ZAP refusal reads in libzmq: its client then
                        // reports an authentication failure and gives the endpoint up.
                        let error = server.refuse("400");
                        self.push_command_body(&error);
                        return Err(Error::Unauthorized);
                    }
                    let properties = Properties::parse(&properties)?;
                    let ready = server.ready(&metadata);
                    self.push_command_body(&ready);
                    let State::CurveServer(server) =
                        std::mem::replace(&mut self.state, State::Closed)
                    else {
                        unreachable!("matched above")
                    };
                    self.cipher = Some(Box::new(server.into_cipher()));
                    self.become_ready(properties, Some(client_key), now)
                }
            },
            _ => Ok(()),
        }
    }

    fn on_command(&mut self, body: &[u8], now: Instant) -> Result<()> {
        let cmd = Command::parse(body)?;
        if cmd.name == b"ERROR" {
            return Err(Error::Refused {
                reason: command::parse_error(cmd.data)?,
            });
        }
        match self.state {
            State::NullReady => {
                if cmd.name != b"READY" {
                    return Err(Error::Unexpected {
                        what: "a command other than READY in the NULL handshake",
                    });
                }
                let properties = Properties::parse(cmd.data)?;
                self.become_ready(properties, None, now)
            }
            State::CurveClient(_) | State::CurveServer(_) => self.on_curve_command(body, now),
            State::Ready => {
                self.on_heartbeat(cmd, now);
                Ok(())
            }
            State::Greeting | State::Closed => Ok(()),
        }
    }

    /// PING and PONG after the handshake; other commands (SUBSCRIBE, CANCEL...) mean nothing
    /// to a ROUTER or DEALER and are ignored, as libzmq ignores them.
    fn on_heartbeat(&mut self, cmd: Command<'_>, _now: Instant) {
        if cmd.name != b"PING" {
            return;
        }
        let (ttl, context) = match cmd.data {
            [hi, lo, context @ ..] => (u16::from_be_bytes([*hi, *lo]), context),
            _ => (0, &[][..]),
        };
        if ttl > 0 {
            self.peer_ttl = Some(Duration::from_millis(u64::from(ttl) * 100));
        }
        let context = &context[..context.len().min(command::MAX_PING_CONTEXT)];
        self.push_command(b"PONG", context);
    }

    fn become_ready(
        &mut self,
        properties: Properties,
        curve_key: Option<[u8; 32]>,
        now: Instant,
    ) -> Result<()> {
        let socket_type = properties.get("Socket-Type").cloned().unwrap_or_default();
        if !self.config.socket_type.accepts(&socket_type) {
            return Err(Error::IncompatibleSocketType {
                ours: self.config.socket_type.name(),
                theirs: String::from_utf8_lossy(&socket_type).into_owned(),
            });
        }
        let routing_id = properties.get("Identity").cloned().unwrap_or_default();
        if routing_id.len() > MAX_ROUTING_ID {
            return Err(Error::MalformedCommand {
                what: "an Identity longer than 255 bytes",
            });
        }
        self.state = State::Ready;
        self.handshake_deadline = None;
        if let Some(hb) = self.config.heartbeat {
            if self.peer_minor >= 1 && !hb.interval.is_zero() {
                self.next_ping = Some(now + hb.interval);
            }
        }
        self.events.push_back(Event::Ready(Peer {
            socket_type,
            routing_id,
            properties,
            curve_key,
            minor: self.peer_minor,
        }));
        Ok(())
    }

    fn on_data(&mut self, more: bool, body: Bytes) -> Result<()> {
        if !self.is_ready() {
            return Err(Error::Unexpected {
                what: "a message before the handshake ended",
            });
        }
        self.parts_size = self
            .parts_size
            .saturating_add(body.len() as u64 + FRAME_OVERHEAD);
        if self.parts_size > self.config.max_message_size.saturating_add(FRAME_OVERHEAD) {
            return Err(Error::MessageTooLarge {
                limit: self.config.max_message_size,
            });
        }
        self.parts.push(body);
        if !more {
            self.parts_size = 0;
            let message = std::mem::take(&mut self.parts);
            self.events.push_back(Event::Message(message));
        }
        Ok(())
    }

    /// Queues one frame of a message; `more` when another frame of the same message follows.
    /// Fails when the handshake is not done (or the connection closed).
    pub fn send_frame<P: Payload + ?Sized>(&mut self, payload: &P, more: bool) -> Result<()> {
        if !self.is_ready() {
            return Err(Error::Unexpected {
                what: "a message sent before the handshake ended",
            });
        }
        let len = payload.len();
        if let Some(cipher) = self.cipher.as_mut() {
            self.scratch.clear();
            self.scratch.resize(len, 0);
            payload.write_to(&mut self.scratch);
            cipher.encrypt(more, &[&self.scratch], self.out.tail());
            // One large frame must not keep its copy's memory for the connection's life.
            if self.scratch.capacity() > MAX_SCRATCH {
                self.scratch = Vec::new();
            }
            return Ok(());
        }
        let flags = if more { frame::MORE } else { 0 };
        let tail = self.out.tail();
        frame::write_header(tail, flags, len);
        if len >= ZERO_COPY_MIN {
            if let Some(bytes) = payload.to_bytes() {
                self.out.push_bytes(bytes);
                return Ok(());
            }
        }
        let start = tail.len();
        tail.resize(start + len, 0);
        payload.write_to(&mut tail[start..]);
        Ok(())
    }

    /// Queues a whole message.
    pub fn send<P: Payload>(&mut self, frames: &[P]) -> Result<()> {
        let last = frames.len().saturating_sub(1);
        for (i, frame) in frames.iter().enumerate() {
            self.send_frame(frame, i < last)?;
        }
        Ok(())
    }

    /// Queues an ERROR with `reason` and closes: what a server sends when it refuses a
    /// handshake. The driver writes the outbox, then hangs up.
    pub fn refuse(&mut self, reason: &str) {
        self.push_command(b"ERROR", &command::error_data(reason));
        self.state = State::Closed;
    }

    /// Queues a command; under CURVE after the handshake, in a MESSAGE box.
    fn push_command(&mut self, name: &[u8], data: &[u8]) {
        let tail = self.out.tail();
        match self.cipher.as_mut() {
            Some(cipher) => cipher.encrypt_command(&[&[name.len() as u8], name, data], tail),
            None => command::write(tail, name, data),
        }
    }

    /// Queues a plain command frame from its body (name-size, name, data), as CURVE's
    /// handshake makes them.
    fn push_command_body(&mut self, body: &[u8]) {
        let tail = self.out.tail();
        frame::write_header(tail, frame::COMMAND, body.len());
        tail.extend_from_slice(body);
    }

    /// The next moment [`handle_timeout`](Self::handle_timeout) has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let timeout = self
            .config
            .heartbeat
            .filter(|hb| !hb.timeout.is_zero())
            .and_then(|hb| self.ping_unanswered_since.map(|t| t + hb.timeout));
        let ttl = self.peer_ttl.map(|ttl| self.last_input + ttl);
        [self.handshake_deadline, self.next_ping, timeout, ttl]
            .into_iter()
            .flatten()
            .min()
    }

    /// The clock reached `now`: sends a PING when one is due; fails when the handshake took
    /// too long or the peer went silent.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<()> {
        if self.is_closed() {
            return Ok(());
        }
        let result = self.timers(now);
        if result.is_err() {
            self.state = State::Closed;
        }
        result
    }

    fn timers(&mut self, now: Instant) -> Result<()> {
        if self.handshake_deadline.is_some_and(|d| now >= d) {
            return Err(Error::HandshakeTimeout);
        }
        if self
            .peer_ttl
            .is_some_and(|ttl| now >= self.last_input + ttl)
        {
            return Err(Error::HeartbeatTimeout);
        }
        let Some(hb) = self.config.heartbeat else {
            return Ok(());
        };
        // A zero timeout is none, as libzmq's ZMQ_HEARTBEAT_TIMEOUT.
        if !hb.timeout.is_zero()
            && self
                .ping_unanswered_since
                .is_some_and(|since| now >= since + hb.timeout)
        {
            return Err(Error::HeartbeatTimeout);
        }
        if let Some(at) = self.next_ping.filter(|&at| now >= at) {
            let ttl = (hb.ttl.as_millis() / 100).min(u128::from(u16::MAX)) as u16;
            self.push_command(b"PING", &ttl.to_be_bytes());
            self.ping_unanswered_since.get_or_insert(now);
            // The next one an interval after this one was due; after a long stall, an
            // interval from now rather than a burst to catch up.
            let next = at + hb.interval;
            self.next_ping = Some(if next <= now { now + hb.interval } else { next });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
