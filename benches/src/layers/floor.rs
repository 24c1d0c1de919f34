//! The floor: plain TCP between the two processes, no messaging library at all. What the
//! kernel's loopback costs by itself; every engine (libzmq in `raw`, or one of ours) adds to
//! it.
//!
//! A message is a 4-byte big-endian length and the payload. The server echoes each message
//! back on a blocking thread per connection; the client keeps `window` payloads in flight
//! and matches replies in order, as the `raw` row does. Both ends set `TCP_NODELAY`.
//!
//! Neither end makes a system call per message when more than one is ready: the server
//! writes back, in one `write`, every whole message its last `read` completed, and the
//! client's writer sends every request asked for since its last `write` in one. libzmq does
//! the same (its I/O thread batches up to 8 kB per `write`); a first version, a `write` per
//! message at each end, ran at a quarter of the `raw` row's rate with 100 in flight: no
//! floor under anything. One at a time both ends still make one `read` and one `write` per message.
//!
//! With more than one payload in flight the client writes on a thread of its own. A single
//! thread that reads a reply, then writes a request, deadlocks once the window holds more
//! bytes than the socket buffers of both directions: its write blocks on a full send
//! buffer while the server, blocked writing echoes into the client's full receive buffer,
//! no longer reads. Linux grows loopback buffers far enough for 1000 x 2 kB, not for
//! 100 x 1 MB (see the tests), and promises neither. At window 1 it cannot happen (the
//! server reads the whole request before it writes), so there the client thread writes
//! itself and the latency run pays no hand-off between threads.

use std::collections::VecDeque;
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use super::{announce, Job};
use crate::error::{Error, Result};
use crate::measure::{Plan, Point, Recorder};

/// The largest payload a server accepts: far above any size measured, so a larger length
/// means a broken peer, not a big message (and is refused before anything is allocated).
const MAX_PAYLOAD: usize = 64 << 20;

/// Bytes of the length prefix.
const HEADER: usize = 4;

/// Bytes the server reads, and the client's writer writes, at most per system call (more
/// when one message is larger).
const BATCH: usize = 64 << 10;

/// The `host:port` of a `tcp://host:port` endpoint, as the other rows write them.
fn address(endpoint: &str) -> Result<&str> {
    endpoint
        .strip_prefix("tcp://")
        .ok_or_else(|| Error::BadEndpoint {
            endpoint: endpoint.to_owned(),
        })
}

/// The listener of a server on `endpoint` (port 0 picks a free one).
fn bind(endpoint: &str) -> Result<TcpListener> {
    Ok(TcpListener::bind(address(endpoint)?)?)
}

/// Binds, announces the bound endpoint, then echoes until the process ends.
pub(super) fn serve(endpoint: &str) -> Result<()> {
    let listener = bind(endpoint)?;
    announce(&format!("tcp://{}", listener.local_addr()?))?;
    accept(&listener)
}

/// Accepts connections forever, each echoed by a thread of its own.
fn accept(listener: &TcpListener) -> Result<()> {
    loop {
        let (stream, peer) = listener.accept()?;
        stream.set_nodelay(true)?;
        thread::spawn(move || {
            if let Err(e) = echo(&stream) {
                eprintln!("floor server: connection from {peer}: {e}");
            }
        });
    }
}

/// Echoes every message of one connection until the client closes it.
fn echo(stream: &TcpStream) -> Result<()> {
    let (mut reader, mut writer) = (stream, stream);
    // `buf[..filled]`: bytes read and not yet echoed, at most one partial message (the
    // whole ones go back as soon as they are complete).
    let mut buf = vec![0; BATCH];
    let mut filled = 0;
    loop {
        // Never an empty slice (whose read of 0 would look like the end): a partial message
        // is shorter than the buffer, which grows to hold the next one whole.
        let n = reader.read(&mut buf[filled..])?;
        if n == 0 {
            // The client closing between two messages is the end, not an error.
            return if filled == 0 {
                Ok(())
            } else {
                Err(io::Error::from(io::ErrorKind::UnexpectedEof).into())
            };
        }
        filled += n;
        let (whole, next) = whole_messages(&buf[..filled])?;
        if whole > 0 {
            writer.write_all(&buf[..whole])?;
            buf.copy_within(whole..filled, 0);
            filled -= whole;
        }
        if let Some(next) = next.filter(|&next| next > buf.len()) {
            buf.resize(next, 0);
        }
    }
}

/// How many bytes at the front of `bytes` are whole messages, and the length (header
/// included) of the partial message after them once its header is there.
fn whole_messages(bytes: &[u8]) -> Result<(usize, Option<usize>)> {
    let mut at = 0;
    while let Some(&[a, b, c, d]) = bytes.get(at..at + HEADER) {
        let len = HEADER + decode_len([a, b, c, d])?;
        if bytes.len() - at < len {
            return Ok((at, Some(len)));
        }
        at += len;
    }
    Ok((at, None))
}

/// The payload length a header announces, refused above [`MAX_PAYLOAD`].
fn decode_len(header: [u8; HEADER]) -> Result<usize> {
    let len = u32::from_be_bytes(header);
    usize::try_from(len)
        .ok()
        .filter(|&len| len <= MAX_PAYLOAD)
        .ok_or(Error::TooLarge {
            len: u64::from(len),
            limit: MAX_PAYLOAD,
        })
}

/// One request on the wire: the header, then `size` bytes of the job's payload.
fn encode(job: &Job) -> Result<Vec<u8>> {
    let len = u32::try_from(job.size)
        .ok()
        .filter(|_| job.size <= MAX_PAYLOAD)
        .ok_or(Error::TooLarge {
            len: job.size as u64,
            limit: MAX_PAYLOAD,
        })?;
    let mut message = Vec::with_capacity(HEADER + job.size);
    message.extend_from_slice(&len.to_be_bytes());
    message.extend_from_slice(&job.payload());
    Ok(message)
}

/// Blocking client: one point.
pub(super) fn client(job: &Job) -> Result<Point> {
    let stream = TcpStream::connect(address(&job.endpoint)?)?;
    stream.set_nodelay(true)?;
    let message = encode(job)?;
    let mut replies = Replies::new(&stream, job);
    // One round trip so the connection is up before the plan starts.
    (&stream).write_all(&message)?;
    replies.next()?;

    let window = job.window.max(1);
    if window == 1 {
        // The latency run: this thread writes (see the module's doc).
        return run(job, &mut replies, || (&stream).write_all(&message));
    }
    thread::scope(|scope| {
        let (requests, to_write) = mpsc::channel::<()>();
        let writer = scope.spawn(|| write_each(&stream, &message, window, to_write));
        let point = run(job, &mut replies, || {
            // A closed channel means the writer stopped on an error, which `join` returns.
            requests
                .send(())
                .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
        });
        drop(requests);
        if point.is_err() {
            // Whatever stopped the reader, the writer may be blocked on a full socket.
            let _ = stream.shutdown(Shutdown::Both);
        }
        let written = writer
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // The writer's error first: the reader's is then only its consequence.
        written.and(point)
    })
}

/// The writer thread: a message per request, every request asked for since the last write
/// in one write (up to [`BATCH`] bytes), until the reader drops its sender. On an error the
/// socket is shut down, so that a reader waiting for a reply wakes up.
fn write_each(
    stream: &TcpStream,
    message: &[u8],
    window: usize,
    requests: mpsc::Receiver<()>,
) -> Result<()> {
    let per_write = (BATCH / message.len()).clamp(1, window);
    // The message `per_write` times, back to back: any number of requests up to that is one
    // slice of it.
    let batch = message.repeat(per_write);
    let mut writer = stream;
    while let Ok(()) = requests.recv() {
        let mut pending = 1 + requests.try_iter().count();
        while pending > 0 {
            let n = pending.min(per_write);
            if let Err(e) = writer.write_all(&batch[..n * message.len()]) {
                let _ = stream.shutdown(Shutdown::Both);
                return Err(e.into());
            }
            pending -= n;
        }
    }
    Ok(())
}

/// The window's loop: `send` starts one request (`window` of them up front, then one per
/// reply while the plan lasts), replies are matched in order.
fn run(
    job: &Job,
    replies: &mut Replies<'_>,
    mut send: impl FnMut() -> io::Result<()>,
) -> Result<Point> {
    let mut recorder = Recorder::new(Plan::starting_now(job.warmup, job.duration));
    let window = job.window.max(1);
    let mut sent_at = VecDeque::with_capacity(window);
    for _ in 0..window {
        sent_at.push_back(Instant::now());
        send()?;
    }
    while !sent_at.is_empty() {
        replies.next()?;
        let now = Instant::now();
        let sent = sent_at.pop_front().ok_or(Error::UnexpectedReply)?;
        recorder.record(sent, now);
        if recorder.keep_sending(now) {
            sent_at.push_back(now);
            send()?;
        }
    }
    Ok(recorder.finish(job.layer, job.size, window))
}

/// The client's read side: reads one echo at a time and checks its length.
struct Replies<'a> {
    /// The connection, buffered: at a large window one `read` brings in many replies.
    reader: BufReader<&'a TcpStream>,
    /// Room for one reply's payload.
    payload: Vec<u8>,
    /// The job, for the length every reply must have.
    job: &'a Job,
}

impl<'a> Replies<'a> {
    /// The read side of `stream`.
    fn new(stream: &'a TcpStream, job: &'a Job) -> Replies<'a> {
        Replies {
            reader: BufReader::with_capacity(BATCH, stream),
            payload: vec![0; job.size],
            job,
        }
    }

    /// Waits for the next reply, whole.
    fn next(&mut self) -> Result<()> {
        let mut header = [0; HEADER];
        self.reader.read_exact(&mut header)?;
        let len = decode_len(header)?;
        // Checked before reading: a reply of the wrong length is not read into the buffer.
        self.job.check_reply(len)?;
        self.reader.read_exact(&mut self.payload[..len])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::layers::Layer;

    /// A server on a free loopback port in a thread of this process; its endpoint.
    fn start_server() -> String {
        let listener = bind("tcp://127.0.0.1:0").unwrap();
        let endpoint = format!("tcp://{}", listener.local_addr().unwrap());
        thread::spawn(move || accept(&listener));
        endpoint
    }

    /// Runs one short point in a thread; fails the test if it takes more than 30 s (a
    /// deadlocked window never ends).
    fn measure(endpoint: String, size: usize, window: usize) -> Point {
        let job = Job {
            layer: Layer::Floor,
            endpoint,
            size,
            window,
            warmup: Duration::from_millis(50),
            duration: Duration::from_millis(200),
        };
        let (done, result) = mpsc::channel();
        thread::spawn(move || done.send(client(&job).map_err(|e| e.to_string())));
        result
            .recv_timeout(Duration::from_secs(30))
            .expect("the point ends: no deadlock")
            .expect("the point succeeds")
    }

    #[test]
    fn one_request_at_a_time_is_echoed_and_timed() {
        let point = measure(start_server(), 100, 1);
        assert_eq!(
            (point.layer, point.size, point.window),
            (Layer::Floor, 100, 1)
        );
        assert!(point.completed > 0);
        let latency = point.latency_us.unwrap();
        assert!(latency.p50 > 0.0 && latency.p50 <= latency.p99);
    }

    #[test]
    fn a_window_of_1000_large_payloads_does_not_deadlock() {
        // 1000 x 2004 bytes in flight: more than the loopback socket buffers start with.
        let point = measure(start_server(), 2000, 1000);
        assert_eq!(point.window, 1000);
        assert!(point.completed > 0);
    }

    #[test]
    fn a_window_larger_than_the_socket_buffers_does_not_deadlock() {
        // 100 MB in flight, over what Linux's loopback buffers grow to by default (4 MB to
        // send, 32 MB to receive, each way): a client that read and wrote on one thread
        // stopped here, its write and the server's both blocked on full buffers.
        let point = measure(start_server(), 1 << 20, 100);
        assert_eq!(point.window, 100);
        assert!(point.completed > 0);
    }

    #[test]
    fn one_server_echoes_several_connections_at_once() {
        let endpoint = start_server();
        let other = endpoint.clone();
        let first = thread::spawn(move || measure(other, 500, 10));
        let second = measure(endpoint, 1000, 10);
        assert!(first.join().unwrap().completed > 0);
        assert!(second.completed > 0);
    }

    #[test]
    fn whole_messages_are_found_up_to_the_partial_one() {
        let two = [0, 0, 0, 1, 0xab, 0, 0, 0, 2, 0xab, 0xab];
        assert_eq!(whole_messages(&two).unwrap(), (11, None));
        // A third message's header and one byte of its three.
        let mut three = two.to_vec();
        three.extend_from_slice(&[0, 0, 0, 3, 0xab]);
        assert_eq!(whole_messages(&three).unwrap(), (11, Some(7)));
        // Half a header: nothing known of it yet.
        assert_eq!(whole_messages(&three[..13]).unwrap(), (11, None));
        assert_eq!(whole_messages(&[]).unwrap(), (0, None));
        let over = u32::try_from(MAX_PAYLOAD + 1).unwrap().to_be_bytes();
        assert!(whole_messages(&over).is_err());
    }

    #[test]
    fn a_length_over_the_limit_is_an_error() {
        let over = u32::try_from(MAX_PAYLOAD + 1).unwrap().to_be_bytes();
        assert!(matches!(decode_len(over), Err(Error::TooLarge { .. })));
        let at = u32::try_from(MAX_PAYLOAD).unwrap().to_be_bytes();
        assert_eq!(decode_len(at).unwrap(), MAX_PAYLOAD);
        assert_eq!(decode_len([0, 0, 0x07, 0xd0]).unwrap(), 2000);
    }

    #[test]
    fn an_endpoint_without_its_scheme_is_refused() {
        assert!(matches!(
            address("127.0.0.1:1"),
            Err(Error::BadEndpoint { .. })
        ));
        assert_eq!(address("tcp://127.0.0.1:1").unwrap(), "127.0.0.1:1");
    }
}
