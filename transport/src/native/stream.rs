//! What the native engine's connections run on: a TCP stream (`tcp://host:port`) or a Unix
//! domain stream (`ipc://path`), the endpoints that name them, and their listeners.
//!
//! `ipc://` is ZMTP over a Unix stream socket, as libzmq speaks it, so a native socket and a
//! libzmq one meet over the same path. Binding differs from libzmq in one point: libzmq
//! removes whatever file is at the path before it binds, so a second process binding a
//! path in use silently takes it over. Here a path some live socket listens on is
//! `AddrInUse`, and only a file nobody listens on (left by a process that died) is
//! removed. `ipc://*` binds a fresh path in a new private directory under the temporary
//! directory, as libzmq's wildcard does. A listener removes its socket file (and the
//! wildcard's directory) when it is unbound or its socket closes. Linux's abstract names
//! (`ipc://@name`) are libzmq's only.

use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::net::{tcp, unix, TcpListener, TcpStream, UnixListener, UnixStream};

use crate::error::Error;

/// The longest socket path Linux takes (`sun_path` is 108 bytes with its final NUL).
const MAX_PATH: usize = 107;

/// An endpoint the native engine speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Address {
    /// `host:port` of a `tcp://` endpoint (`*` as the host: every interface; as the port:
    /// any free one).
    Tcp(String),
    /// The path of an `ipc://` endpoint.
    Ipc(PathBuf),
    /// `ipc://*`: a new path of our choosing (bind only).
    IpcAny,
}

impl Address {
    /// Parses `endpoint` (`tcp://host:port`, `ipc://path`, `ipc://*`).
    pub(super) fn parse(endpoint: &str) -> Result<Address, Error> {
        let invalid = |why: &str| Error::InvalidEndpoint {
            endpoint: endpoint.to_owned(),
            source: io::Error::new(io::ErrorKind::InvalidInput, why.to_owned()),
        };
        if let Some(path) = endpoint.strip_prefix("ipc://") {
            return match path {
                "*" => Ok(Address::IpcAny),
                "" => Err(invalid("no path")),
                p if p.starts_with('@') => Err(invalid(
                    "abstract socket names are the libzmq engine's only (Engine::Libzmq)",
                )),
                p if p.len() > MAX_PATH => Err(invalid("a path of at most 107 bytes")),
                p if p.contains('\0') => Err(invalid("a path without NUL")),
                p => Ok(Address::Ipc(PathBuf::from(p))),
            };
        }
        let rest = endpoint.strip_prefix("tcp://").ok_or_else(|| {
            invalid(
                "the native engine speaks tcp:// and ipc:// (Engine::Libzmq also has inproc://)",
            )
        })?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| invalid("no port"))?;
        let host = if host == "*" { "0.0.0.0" } else { host };
        let port = if port == "*" { "0" } else { port };
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(invalid("a host and a port from 0 to 65535"));
        }
        Ok(Address::Tcp(format!("{host}:{port}")))
    }

    /// Parses an endpoint to connect to: `ipc://*` names no path to go to.
    pub(super) fn parse_remote(endpoint: &str) -> Result<Address, Error> {
        match Address::parse(endpoint)? {
            Address::IpcAny => Err(Error::InvalidEndpoint {
                endpoint: endpoint.to_owned(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "ipc://* can only be bound"),
            }),
            address => Ok(address),
        }
    }

    /// Connects to it.
    pub(super) async fn connect(&self) -> io::Result<Stream> {
        match self {
            Address::Tcp(address) => TcpStream::connect(address).await.map(Stream::Tcp),
            Address::Ipc(path) => UnixStream::connect(path).await.map(Stream::Unix),
            Address::IpcAny => Err(io::ErrorKind::InvalidInput.into()),
        }
    }

    /// Listens on it (inside a runtime): the listener and the endpoint it is bound to,
    /// with the port or path that was chosen for a wildcard.
    pub(super) fn bind(&self) -> io::Result<(Listener, String)> {
        match self {
            Address::Tcp(address) => {
                let listener = std::net::TcpListener::bind(address)?;
                listener.set_nonblocking(true)?;
                let actual = format!("tcp://{}", listener.local_addr()?);
                Ok((Listener::Tcp(TcpListener::from_std(listener)?), actual))
            }
            Address::Ipc(path) => bind_unix(path, None),
            Address::IpcAny => {
                let dir = private_dir()?;
                bind_unix(&dir.join("socket"), Some(dir.clone())).inspect_err(|_| {
                    let _ = std::fs::remove_dir(&dir);
                })
            }
        }
    }
}

/// Binds a Unix listener at `path`, first removing a socket file there that nobody
/// listens on any more: the listener, which removes its file when dropped (and `dir`, the
/// wildcard's directory), and its endpoint.
///
/// The stale file is removed only if it is still the file that was probed (another
/// process may have taken the path meanwhile), and a second `AddrInUse` is final.
fn bind_unix(path: &Path, dir: Option<PathBuf>) -> io::Result<(Listener, String)> {
    let listener = match UnixListener::bind(path) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            let probed = file_id(path)?;
            if !is_stale(path) {
                return Err(e);
            }
            if file_id(path).ok() == Some(probed) {
                match std::fs::remove_file(path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            UnixListener::bind(path)?
        }
        bound => bound?,
    };
    let file = SocketFile {
        path: std::path::absolute(path)?,
        id: file_id(path)?,
        dir,
    };
    let actual = format!("ipc://{}", path.display());
    Ok((
        Listener::Unix {
            _file: file,
            listener,
        },
        actual,
    ))
}

/// The device and inode of the file at `path` (not following a symbolic link).
fn file_id(path: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

/// Whether `path` is a socket file that refuses connections: its listener is gone. The
/// probe does not wait: a live listener whose backlog is full answers "try again", which
/// counts as live.
fn is_stale(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if !is_socket {
        return false;
    }
    let probe = || -> io::Result<()> {
        let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
        socket.set_nonblocking(true)?;
        socket.connect(&socket2::SockAddr::unix(path)?)
    };
    matches!(probe(), Err(e) if e.kind() == io::ErrorKind::ConnectionRefused)
}

/// A new directory only we may enter, under the temporary directory. Its name need not be
/// secret: it is created exclusively, and taken by nobody else once it exists.
fn private_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    use std::sync::atomic::{AtomicU32, Ordering};
    static MADE: AtomicU32 = AtomicU32::new(0);
    let base = std::env::temp_dir();
    for _ in 0..16 {
        let salt = rand::random::<u32>();
        let made = MADE.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!("zeronode-{}-{made}-{salt:08x}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            created => return created.map(|()| dir),
        }
    }
    Err(io::ErrorKind::AlreadyExists.into())
}

/// A bound socket's file, removed with its listener, if it is still the file bound: a
/// libzmq socket may have taken the path over since (it removes and rebinds), and its
/// file is not ours to remove.
#[derive(Debug)]
pub(super) struct SocketFile {
    /// Absolute: a later change of the working directory does not move it.
    path: PathBuf,
    /// The device and inode the bind made.
    id: (u64, u64),
    /// The wildcard's directory, removed too.
    dir: Option<PathBuf>,
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if file_id(&self.path).ok() == Some(self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A bound endpoint's listener.
#[derive(Debug)]
pub(super) enum Listener {
    /// `tcp://`.
    Tcp(TcpListener),
    /// `ipc://`.
    Unix {
        /// Its file, removed when the listener is dropped (held only for that). First, so
        /// that it is dropped first: the path is gone before the socket closes, and no other
        /// process can find it stale and bind a file of its own that we would remove.
        _file: SocketFile,
        /// The listener.
        listener: UnixListener,
    },
}

impl Listener {
    /// The next connection.
    pub(super) async fn accept(&self) -> io::Result<Stream> {
        match self {
            Listener::Tcp(listener) => listener.accept().await.map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix { listener, .. } => {
                listener.accept().await.map(|(s, _)| Stream::Unix(s))
            }
        }
    }
}

/// One connection's byte stream.
#[derive(Debug)]
pub(super) enum Stream {
    /// Over TCP.
    Tcp(TcpStream),
    /// Over a Unix domain socket.
    Unix(UnixStream),
}

impl Stream {
    /// Sends each write at once (TCP's `NODELAY`; a Unix stream has no delay to turn off).
    pub(super) fn set_nodelay(&self) {
        if let Stream::Tcp(stream) = self {
            let _ = stream.set_nodelay(true);
        }
    }

    /// Splits the stream: the driver's end, which reads (and writes what is queued), and a
    /// second handle to write with from another thread (see `link.rs`, write-through).
    pub(super) fn split(self) -> (Reader, Writer) {
        match self {
            Stream::Tcp(s) => {
                let (read, write) = s.into_split();
                (Reader::Tcp(read), Writer::Tcp(write))
            }
            Stream::Unix(s) => {
                let (read, write) = s.into_split();
                (Reader::Unix(read), Writer::Unix(write))
            }
        }
    }
}

/// The driver's end of a connection's stream: it reads, waits for readiness, and writes
/// what senders queued. Its half owns the stream with the [`Writer`]: the connection's file
/// descriptor closes once both are dropped.
#[derive(Debug)]
pub(super) enum Reader {
    /// Over TCP.
    Tcp(tcp::OwnedReadHalf),
    /// Over a Unix domain socket.
    Unix(unix::OwnedReadHalf),
}

impl Reader {
    pub(super) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Reader::Tcp(s) => s.as_ref().poll_read_ready(cx),
            Reader::Unix(s) => s.as_ref().poll_read_ready(cx),
        }
    }

    pub(super) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Reader::Tcp(s) => s.as_ref().poll_write_ready(cx),
            Reader::Unix(s) => s.as_ref().poll_write_ready(cx),
        }
    }

    /// Reads what the stream has into `buf`'s spare room: `Pending` (the waker kept) when it
    /// has nothing.
    ///
    /// Where tokio's reactor is edge-triggered (epoll, kqueue), a read that fills less than
    /// the room offered tells that the kernel's queue is empty, and tokio's `poll_read` then
    /// forgets the stream's readiness: the next call waits for the next wake-up without a
    /// system call. `try_read_buf` forgets it only on a read that finds nothing, so every
    /// wake-up cost a second `recvfrom` answering `EAGAIN`, on a socket that is cold when
    /// calls are spread over many connections. (The read halves' `poll_read` is the
    /// stream's own.)
    pub(super) fn poll_read_buf(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut BytesMut,
    ) -> Poll<io::Result<usize>> {
        match self {
            Reader::Tcp(s) => tokio_util::io::poll_read_buf(Pin::new(s), cx, buf),
            Reader::Unix(s) => tokio_util::io::poll_read_buf(Pin::new(s), cx, buf),
        }
    }

    pub(super) fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Reader::Tcp(s) => s.as_ref().try_write_vectored(bufs),
            Reader::Unix(s) => s.as_ref().try_write_vectored(bufs),
        }
    }
}

/// A handle to write on a connection from any thread, without waiting (see `link.rs`).
///
/// Dropped as it is, a tokio write half shuts the stream's sending side down; this one is
/// [`release`](Writer::release)d instead, so a connection ends as it did before it was
/// split: when the driver drops its [`Reader`], which closes the file descriptor.
#[derive(Debug)]
pub(super) enum Writer {
    /// Over TCP.
    Tcp(tcp::OwnedWriteHalf),
    /// Over a Unix domain socket.
    Unix(unix::OwnedWriteHalf),
}

impl Writer {
    /// Writes what the socket takes now: `WouldBlock` when it takes nothing.
    pub(super) fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Writer::Tcp(s) => s.try_write_vectored(bufs),
            Writer::Unix(s) => s.try_write_vectored(bufs),
        }
    }

    /// Lets go of the stream without shutting its sending side down.
    pub(super) fn release(self) {
        match self {
            Writer::Tcp(s) => s.forget(),
            Writer::Unix(s) => s.forget(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_others_are_refused() {
        let tcp = |s: &str| Address::Tcp(s.to_owned());
        assert_eq!(
            Address::parse("tcp://127.0.0.1:5555").unwrap(),
            tcp("127.0.0.1:5555")
        );
        assert_eq!(Address::parse("tcp://*:*").unwrap(), tcp("0.0.0.0:0"));
        assert_eq!(Address::parse("tcp://[::1]:0").unwrap(), tcp("[::1]:0"));
        assert_eq!(
            Address::parse("tcp://localhost:80").unwrap(),
            tcp("localhost:80")
        );
        assert_eq!(
            Address::parse("ipc:///tmp/x").unwrap(),
            Address::Ipc(PathBuf::from("/tmp/x"))
        );
        assert_eq!(
            Address::parse("ipc://relative/x").unwrap(),
            Address::Ipc(PathBuf::from("relative/x"))
        );
        assert_eq!(Address::parse("ipc://*").unwrap(), Address::IpcAny);
        let long = format!("ipc:///{}", "x".repeat(MAX_PATH));
        for bad in [
            "tcp://nohost",
            "tcp://:1",
            "tcp://h:99999",
            "inproc://a",
            "ipc://",
            "ipc://@abstract",
            long.as_str(),
        ] {
            assert!(
                matches!(Address::parse(bad), Err(Error::InvalidEndpoint { .. })),
                "{bad}"
            );
        }
        assert!(Address::parse_remote("ipc://*").is_err());
        assert!(Address::parse_remote("ipc:///tmp/x").is_ok());
    }

    #[tokio::test]
    async fn a_path_in_use_is_refused_and_a_stale_one_is_taken() {
        let dir = private_dir().unwrap();
        let path = dir.join("s");
        let address = Address::Ipc(path.clone());
        let (listener, actual) = address.bind().unwrap();
        assert_eq!(actual, format!("ipc://{}", path.display()));
        let e = address.bind().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        // A file left by a listener that is gone (as a killed process leaves it).
        drop(listener);
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let (listener, _) = address.bind().unwrap();
        let connected = address.connect().await.unwrap();
        assert!(matches!(connected, Stream::Unix(_)));
        drop(listener);
        assert!(!path.exists(), "an unbound listener removes its file");
        std::fs::remove_dir(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_path_taken_over_since_is_not_removed() {
        let dir = private_dir().unwrap();
        let path = dir.join("s");
        let (listener, _) = Address::Ipc(path.clone()).bind().unwrap();
        // As libzmq binds a path in use: it removes the file and binds its own.
        std::fs::remove_file(&path).unwrap();
        let theirs = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(listener);
        assert!(path.exists(), "the other socket's file is left alone");
        drop(theirs);
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_dir(&dir).unwrap();
    }

    #[tokio::test]
    async fn the_wildcard_binds_a_private_path_and_removes_it() {
        let (listener, actual) = Address::IpcAny.bind().unwrap();
        let path = PathBuf::from(actual.strip_prefix("ipc://").unwrap());
        let dir = path.parent().unwrap().to_owned();
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        let connected = Address::parse_remote(&actual)
            .unwrap()
            .connect()
            .await
            .unwrap();
        drop(connected);
        drop(listener);
        assert!(!path.exists());
        assert!(!dir.exists());
    }
}
