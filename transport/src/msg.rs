//! libzmq messages owned directly (`zmq_msg_t` through zmq-sys), for the two things the `zmq`
//! crate's `Message` cannot do: hand libzmq a second reference to a received message (so a
//! frame received and sent on is never copied), receive straight into a value that `Bytes`
//! can own, and send from a buffer libzmq gives back ([`crate::pool`]).
//!
//! The crate's `unsafe` blocks are here, in pool.rs and one in socket.rs (registering
//! ZMQ_FD), each with its argument.

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::ffi::CStr;
use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use zmq_sys::zmq_msg_t;

use crate::pool;

/// One libzmq message, closed on drop.
///
/// libzmq messages are plain values (the zmq crate moves its `Message` freely): a message of
/// up to 33 bytes keeps its data inside the `zmq_msg_t`, a larger one points to a buffer
/// that libzmq reference-counts. So `data()` is stable across moves only for the latter,
/// which is all [`Recent`] relies on.
pub(crate) struct Msg(zmq_msg_t);

// SAFETY: a zmq_msg_t is not tied to the thread that made it; libzmq's own I/O thread closes
// the messages an application thread sent. Reference counts of shared buffers are atomic.
unsafe impl Send for Msg {}

impl Msg {
    /// An empty message, ready to receive into.
    pub(crate) fn new() -> Msg {
        let mut raw = MaybeUninit::<zmq_msg_t>::uninit();
        // SAFETY: zmq_msg_init initialises the whole struct and cannot fail (it returns 0).
        unsafe {
            zmq_sys::zmq_msg_init(raw.as_mut_ptr());
            Msg(raw.assume_init())
        }
    }

    /// A second reference to the same content: no copy and no allocation for a message
    /// whose buffer libzmq reference-counts (an atomic increment), a 64-byte copy for a
    /// small one. `None` if libzmq refuses (only for an invalid message, which ours never
    /// are; checked all the same, since an empty copy sent in its place would be wrong data).
    pub(crate) fn share(&mut self) -> Option<Msg> {
        let mut copy = Msg::new();
        // SAFETY: both point to initialised messages; zmq_msg_copy closes `copy`'s (empty)
        // content first.
        let rc = unsafe { zmq_sys::zmq_msg_copy(&mut copy.0, &mut self.0) };
        (rc == 0).then_some(copy)
    }

    /// A new message holding `frame`'s bytes: in a pooled buffer that libzmq gives back when
    /// done with it, its header in the same buffer (see [`crate::pool`]), or, for a small or a
    /// very large frame, in a buffer libzmq allocates.
    ///
    /// `ENOMEM` if libzmq cannot allocate the message (never an empty message in its place).
    pub(crate) fn from_frame<F: crate::socket::Frame + ?Sized>(
        frame: &F,
        spares: &mut pool::Spares,
    ) -> zmq::Result<Msg> {
        let len = frame.len();
        if len >= Recent::MIN_LEN {
            if let Some(class) = pool::class_of(len) {
                let mut buffer = spares.take(class);
                frame.write_to(&mut buffer.frame_mut(class)[..len]);
                let (header, data) = buffer.into_raw();
                let mut raw = MaybeUninit::<zmq_msg_t>::uninit();
                // SAFETY: `data` points to `len` initialised bytes of a buffer of `class`
                // whose first `pool::HEADER` bytes (at `header`, aligned to 16) hold libzmq's
                // message header; libzmq owns the buffer from now on and hands it back
                // through `give_back` with the class as hint.
                #[cfg(zmq_msg_init_external)]
                let rc = unsafe {
                    zmq_sys::zeronode_msg_init_external(
                        raw.as_mut_ptr(),
                        header,
                        data,
                        len,
                        Some(pool::give_back),
                        pool::hint(class),
                    )
                };
                // Without the shim (see build.rs), libzmq allocates the header itself.
                // SAFETY: as above; the header room is left unused.
                #[cfg(not(zmq_msg_init_external))]
                let rc = unsafe {
                    let _ = header;
                    zmq_sys::zmq_msg_init_data(
                        raw.as_mut_ptr(),
                        data,
                        len,
                        Some(pool::give_back),
                        pool::hint(class),
                    )
                };
                if rc == 0 {
                    // SAFETY: initialised by the successful call.
                    return Ok(Msg(unsafe { raw.assume_init() }));
                }
                // Refused (only for a null pointer, which ours never are): the buffer is
                // still ours.
                // SAFETY: the buffer of `class` just handed over and refused.
                unsafe { pool::give_back(data, pool::hint(class)) };
            }
        }
        let mut raw = MaybeUninit::<zmq_msg_t>::uninit();
        // SAFETY: zmq_msg_init_size initialises the message with a buffer of `len` bytes
        // (inside the message up to 33 bytes), or fails (out of memory) leaving nothing to
        // close.
        let mut msg = unsafe {
            if zmq_sys::zmq_msg_init_size(raw.as_mut_ptr(), len) != 0 {
                return Err(zmq::Error::ENOMEM);
            }
            Msg(raw.assume_init())
        };
        if len > 0 {
            // SAFETY: the message's own buffer, `len` bytes, not shared yet.
            let out = unsafe {
                std::slice::from_raw_parts_mut(zmq_sys::zmq_msg_data(&mut msg.0).cast::<u8>(), len)
            };
            frame.write_to(out);
        }
        Ok(msg)
    }

    /// Receives one frame from `socket` without blocking, and returns its size (which
    /// libzmq's receive returns anyway: one call fewer than asking for it after).
    pub(crate) fn recv(&mut self, socket: &mut zmq::Socket) -> zmq::Result<usize> {
        // SAFETY: `self` is an initialised message and `socket` a live socket that we hold
        // exclusively (`&mut`), as libzmq requires of non-thread-safe sockets.
        let rc = unsafe {
            zmq_sys::zmq_msg_recv(&mut self.0, socket.as_mut_ptr(), zmq_sys::ZMQ_DONTWAIT as _)
        };
        match usize::try_from(rc) {
            Err(_) => Err(last_error()),
            // libzmq caps the size it returns at INT_MAX: only then ask.
            Ok(_) if rc == std::ffi::c_int::MAX => Ok(self.as_ref().len()),
            Ok(size) => Ok(size),
        }
    }

    /// The message's bytes, given their size (from [`recv`](Self::recv)): one call fewer
    /// than [`as_ref`](AsRef::as_ref).
    pub(crate) fn bytes(&self, size: usize) -> &[u8] {
        if size == 0 {
            return &[];
        }
        // SAFETY: as in `as_ref`; `size` is the message's size, as libzmq reported it.
        unsafe {
            let data = zmq_sys::zmq_msg_data(std::ptr::addr_of!(self.0).cast_mut());
            std::slice::from_raw_parts(data.cast::<u8>(), size)
        }
    }

    /// Sends this frame on `socket` (libzmq takes the content; `self` is left empty).
    pub(crate) fn send(mut self, socket: &mut zmq::Socket, flags: i32) -> zmq::Result<()> {
        // SAFETY: as in `recv`. On success libzmq owns the content and leaves `self` an
        // empty message, which our drop then closes (a no-op); on failure `self` still owns
        // it and drop releases it.
        let rc = unsafe { zmq_sys::zmq_msg_send(&mut self.0, socket.as_mut_ptr(), flags as _) };
        if rc < 0 {
            Err(last_error())
        } else {
            Ok(())
        }
    }

    /// Whether more frames of the same message follow.
    pub(crate) fn more(&self) -> bool {
        // SAFETY: an initialised message.
        unsafe { zmq_sys::zmq_msg_more(&self.0) != 0 }
    }

    /// A metadata property libzmq attached to a received frame ("User-Id", ...).
    pub(crate) fn property(&self, name: &CStr) -> Option<&str> {
        // SAFETY: an initialised message and a NUL-terminated name. libzmq returns NULL or a
        // NUL-terminated string owned by the message's metadata, which lives as long as the
        // message: the borrow of `self` bounds it.
        unsafe {
            let value = zmq_sys::zmq_msg_gets(&self.0, name.as_ptr());
            if value.is_null() {
                None
            } else {
                CStr::from_ptr(value).to_str().ok()
            }
        }
    }
}

impl AsRef<[u8]> for Msg {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: libzmq's data and size describe the message's bytes, valid while the
        // message is and never written by libzmq after it was received. zmq_msg_data takes
        // a mutable pointer but only reads. An empty message may give a dangling pointer, so
        // it is not used.
        unsafe {
            let size = zmq_sys::zmq_msg_size(&self.0);
            if size == 0 {
                return &[];
            }
            let data = zmq_sys::zmq_msg_data(std::ptr::addr_of!(self.0).cast_mut());
            std::slice::from_raw_parts(data.cast::<u8>(), size)
        }
    }
}

impl Drop for Msg {
    fn drop(&mut self) {
        // SAFETY: an initialised message, closed exactly once.
        unsafe {
            zmq_sys::zmq_msg_close(&mut self.0);
        }
    }
}

/// Sends a copy of `bytes` as one frame: libzmq's `zmq_send`, which makes the message,
/// copies and sends in one call (a routing id: a few bytes, stored inside the message), where
/// building a message first costs four calls.
pub(crate) fn send_bytes(socket: &mut zmq::Socket, bytes: &[u8], flags: i32) -> zmq::Result<()> {
    // SAFETY: a live socket held exclusively (as in `Msg::recv`); libzmq copies `bytes.len()`
    // bytes from `bytes` before it returns.
    let rc = unsafe {
        zmq_sys::zmq_send(
            socket.as_mut_ptr(),
            bytes.as_ptr().cast(),
            bytes.len(),
            flags as _,
        )
    };
    if rc < 0 {
        Err(last_error())
    } else {
        Ok(())
    }
}

/// Receives one frame into `buffer` without blocking (libzmq's `zmq_recv`: the message is
/// made, copied and closed inside one call) and returns its size, which is larger than the
/// buffer when the frame did not fit (it is then cut).
pub(crate) fn recv_bytes(socket: &mut zmq::Socket, buffer: &mut [u8]) -> zmq::Result<usize> {
    // SAFETY: a live socket held exclusively (as in `Msg::recv`); libzmq writes at most
    // `buffer.len()` bytes into `buffer`.
    let rc = unsafe {
        zmq_sys::zmq_recv(
            socket.as_mut_ptr(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            zmq_sys::ZMQ_DONTWAIT as _,
        )
    };
    usize::try_from(rc).map_err(|_| last_error())
}

/// libzmq's error for the call that just failed on this thread.
fn last_error() -> zmq::Error {
    // SAFETY: zmq_errno only reads the calling thread's errno.
    zmq::Error::from_raw(unsafe { zmq_sys::zmq_errno() })
}

/// The frames a socket received last, kept so that sending one of them on (an echo, a
/// forwarder) hands libzmq another reference instead of a copy.
///
/// Sending a fresh copy costs an allocation that libzmq's I/O thread frees, so on a busy
/// socket the two threads contend for the allocator's lock (measured with `perf`: 0.16
/// futex calls per message on the transport echo server, none on raw libzmq's, which
/// forwards the received message itself). A frame is recognised by its address and length:
/// while a message is kept here its buffer stays allocated, so a live `Bytes` with exactly
/// that address and length views exactly those bytes.
///
/// Only frames of at least [`Recent::MIN_LEN`] bytes are kept (smaller ones live inside the
/// `zmq_msg_t`, and copying them is as cheap as sharing), at most [`Recent::CAPACITY`] of
/// them, and none once the socket has nothing more to read: so what is kept is bounded and
/// released when the socket goes idle.
///
/// A socket that never sends on what it receives (a server that answers with new frames)
/// would pay for keeping every frame for nothing: after [`Recent::GIVE_UP`] kept frames in a
/// row were never sent, it keeps none for the next [`Recent::REST`] frames, then tries again.
#[derive(Default)]
pub(crate) struct Recent {
    /// Oldest first.
    kept: VecDeque<Kept>,
    /// Kept frames let go unsent since the last one that was sent.
    unused: u32,
    /// Frames still to let pass without keeping them.
    resting: u32,
}

struct Kept {
    addr: usize,
    len: usize,
    msg: Msg,
    /// For a frame handed out as a copy: the [`Arena`] chunk it was copied into. The entry
    /// stands only while that chunk is the arena's current one, which keeps the address
    /// the copy's own (see [`Arena::generation`]).
    chunk: Option<u64>,
}

impl Recent {
    /// Frames smaller than this are copied when sent: libzmq stores up to 33 bytes inside
    /// the message itself (no allocation), so copying them costs no more than sharing.
    pub(crate) const MIN_LEN: usize = 34;
    /// How many frames are kept.
    pub(crate) const CAPACITY: usize = 8;
    /// Kept frames in a row never sent after which the socket stops keeping for a while.
    pub(crate) const GIVE_UP: u32 = 256;
    /// How many frames pass unkept after giving up.
    pub(crate) const REST: u32 = 4096;

    /// Keeps a reference to `msg` (a frame just received, which the caller keeps too: its
    /// `Bytes` view libzmq's buffer) if it is worth it.
    pub(crate) fn keep(&mut self, msg: &mut Msg) {
        let bytes = msg.as_ref();
        if !self.worth_keeping(bytes.len()) {
            return;
        }
        let (addr, len) = (bytes.as_ptr() as usize, bytes.len());
        if let Some(shared) = msg.share() {
            self.push(addr, len, shared, None);
        }
    }

    /// Keeps `msg` itself (a frame just received) for sending on in place of `copy`, the
    /// copy of its bytes the caller hands out, if it is worth it; otherwise `msg` is closed.
    /// No second reference to take (an atomic increment of counts libzmq's I/O thread also
    /// touches), no message to close later.
    ///
    /// The entry notes the arena chunk the copy is in (`arena`'s current one): while that
    /// chunk is current, the arena holds it, so the copy's address cannot be another
    /// allocation's, and no other frame is cut from the same bytes (the argument of the
    /// type's docs). No reference to the copy is held: that would be two atomic operations
    /// per frame on the copy's count.
    pub(crate) fn keep_owned(&mut self, msg: Msg, copy: &[u8], arena: &Arena) {
        if !self.worth_keeping(copy.len()) {
            return;
        }
        self.push(
            copy.as_ptr() as usize,
            copy.len(),
            msg,
            Some(arena.generation()),
        );
    }

    /// Whether a frame of `len` bytes is kept: not while resting (which counts it), nor when
    /// it is small enough to live inside the message.
    fn worth_keeping(&mut self, len: usize) -> bool {
        if self.resting > 0 {
            self.resting -= 1;
            return false;
        }
        len >= Self::MIN_LEN
    }

    fn push(&mut self, addr: usize, len: usize, msg: Msg, chunk: Option<u64>) {
        if self.kept.len() == Self::CAPACITY {
            self.kept.pop_front();
            self.let_go(1);
        }
        self.kept.push_back(Kept {
            addr,
            len,
            msg,
            chunk,
        });
    }

    /// The kept frame whose bytes are exactly `bytes`, if any, given up to be sent (a frame
    /// sent again later is copied). `arena` is the socket's, whose copies were kept with
    /// [`keep_owned`](Self::keep_owned).
    pub(crate) fn take(&mut self, bytes: &[u8], arena: &Arena) -> Option<Msg> {
        if bytes.len() < Self::MIN_LEN || self.kept.is_empty() {
            return None;
        }
        let (addr, len) = (bytes.as_ptr() as usize, bytes.len());
        let chunk = arena.generation();
        let is = |k: &Kept| k.addr == addr && k.len == len && k.chunk.is_none_or(|c| c == chunk);
        // Newest first: an echo or a forwarder sends on what it received last.
        let found = match self.kept.back() {
            Some(last) if is(last) => self.kept.pop_back(),
            _ => {
                let at = self.kept.iter().rposition(is)?;
                self.kept.remove(at)
            }
        };
        self.unused = 0;
        found.map(|k| k.msg)
    }

    /// Releases every kept frame.
    pub(crate) fn clear(&mut self) {
        self.let_go(self.kept.len());
        self.kept.clear();
    }

    /// Counts `n` kept frames released unsent, and gives up keeping when that is the norm.
    fn let_go(&mut self, n: usize) {
        self.unused = self.unused.saturating_add(n as u32);
        if self.unused >= Self::GIVE_UP {
            self.unused = 0;
            self.resting = Self::REST;
        }
    }
}

/// Where small received frames are copied: slices of one shared chunk, so a small frame
/// costs a copy of its bytes and no allocation of its own.
///
/// Owning libzmq's message instead (as larger frames are) costs an allocation for the
/// owner and, when the frame is dropped, closing the message: atomic decrements of counts
/// that libzmq's I/O thread increments for every message it decodes. Measured (callgrind,
/// transport echo at 100 B): copying saves about a tenth of the server's instructions per
/// message. The price is memory: a frame kept alive keeps its whole chunk
/// ([`Arena::CHUNK`] bytes) alive.
///
/// The chunk filled before the current one is kept as a spare: when the current one is full,
/// the spare is taken again if every copy cut from it is gone (the common case: frames live
/// shorter than a chunk takes to fill), so a busy socket alternates between two chunks
/// instead of allocating one every few dozen frames. Each new chunk cost a large allocation,
/// which made the allocator consolidate the small blocks libzmq's I/O thread frees, and
/// fresh pages to fault in (perf, protocol client at 500 B: 6% of its time in
/// `malloc_consolidate`, `_int_malloc` and the kernel clearing pages).
#[derive(Default)]
pub(crate) struct Arena {
    chunk: BytesMut,
    /// The chunk before `chunk`, to take again once its copies are gone.
    spare: BytesMut,
    /// Counts the chunks: see [`Arena::generation`].
    generation: u64,
}

impl Arena {
    /// Frames up to this size are copied. A request or reply of a few KiB crossed the old
    /// limit of 512 bytes and paid an owner allocated and freed per frame (callgrind,
    /// protocol at 500 B, window 100: about 190 instructions per request on the server, 120
    /// on the client); copying 4 KiB costs less than that.
    pub(crate) const MAX_FRAME: usize = 4096;
    /// Size of one chunk.
    pub(crate) const CHUNK: usize = 16 * 1024;

    /// Which chunk is current: it changes whenever copies start on a chunk (a new one, or
    /// an old one reused from its start once every copy cut from it is gone). While it
    /// does not, the current chunk is allocated and held by the arena, and every copy cut
    /// from it has bytes of its own: so a `Bytes` with the address and length of such a
    /// copy views that copy's bytes (what [`Recent`] relies on for copies).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// A copy of `data` (at most [`Arena::MAX_FRAME`] bytes) in the current chunk.
    pub(crate) fn copy(&mut self, data: &[u8]) -> Bytes {
        if data.is_empty() {
            return Bytes::new();
        }
        if self.chunk.capacity() < data.len() {
            // The spare again if every copy cut from it is gone, else a fresh chunk; the full
            // one becomes the spare.
            std::mem::swap(&mut self.chunk, &mut self.spare);
            if !self.chunk.try_reclaim(Self::CHUNK) {
                self.chunk.reserve(Self::CHUNK);
            }
            self.generation += 1;
        }
        self.chunk.extend_from_slice(data);
        self.chunk.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Recent {
        /// `take` for frames kept with `keep` (which no arena chunk bounds).
        fn take_any(&mut self, bytes: &[u8]) -> Option<Msg> {
            self.take(bytes, &Arena::default())
        }
    }

    #[test]
    fn a_pooled_frame_holds_libzmqs_header_and_comes_back_when_every_copy_is_closed() {
        // 5000 B: a class (8 KiB) that no other test of this crate sends, so the shared
        // list is ours.
        let frame = Bytes::from(vec![9u8; 5000]);
        let class = pool::class_of(frame.len()).expect("pooled");
        let mut spares = pool::Spares::default();
        let mut msg = Msg::from_frame(&frame, &mut spares).expect("a message");
        assert_eq!(msg.as_ref(), &frame[..]);
        let at = msg.as_ref().as_ptr();
        let copy = msg.share().expect("a shared copy");
        assert_eq!(copy.as_ref().as_ptr(), at, "the copy shares the buffer");

        // Closing one copy gives nothing back: the buffer a new socket gets is another.
        drop(msg);
        let mut second = pool::Spares::default();
        let (_, other) = second.take(class).into_raw();
        assert_ne!(other.cast::<u8>().cast_const(), at);
        // SAFETY: the frame of a buffer of `class`, not used again.
        unsafe { pool::give_back(other, pool::hint(class)) };

        // Closing the last one gives the buffer back, and it is taken again.
        drop(copy);
        let mut third = pool::Spares::default();
        let (_, again) = third.take(class).into_raw();
        assert_eq!(again.cast::<u8>().cast_const(), at, "recycled");
        // SAFETY: as above.
        unsafe { pool::give_back(again, pool::hint(class)) };
    }

    impl Msg {
        /// A message holding a copy of `data` (libzmq allocates its buffer).
        fn from_slice(data: &[u8]) -> Msg {
            let mut raw = MaybeUninit::<zmq_msg_t>::uninit();
            // SAFETY: zmq_msg_init_size initialises the message with a buffer of
            // `data.len()` bytes, which we fill.
            unsafe {
                assert_eq!(zmq_sys::zmq_msg_init_size(raw.as_mut_ptr(), data.len()), 0);
                let mut msg = Msg(raw.assume_init());
                let at = zmq_sys::zmq_msg_data(&mut msg.0).cast::<u8>();
                std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len());
                msg
            }
        }
    }

    #[test]
    fn a_kept_frame_is_found_by_its_own_bytes_only_once() {
        let mut recent = Recent::default();
        let mut msg = Msg::from_slice(&[7u8; 100]);
        recent.keep(&mut msg);
        // Equal bytes elsewhere are not the kept frame.
        assert!(recent.take_any(&[7u8; 100]).is_none());
        // A slice of it is not either.
        assert!(recent.take_any(&msg.as_ref()[..50]).is_none());
        let taken = recent
            .take_any(msg.as_ref())
            .expect("the frame itself is found");
        assert_eq!(taken.as_ref(), &[7u8; 100][..]);
        // Given up once: a second send of the same frame copies.
        assert!(recent.take_any(msg.as_ref()).is_none());
    }

    #[test]
    fn small_frames_are_not_kept_and_the_oldest_make_way() {
        let mut recent = Recent::default();
        let mut small = Msg::from_slice(&[1u8; Recent::MIN_LEN - 1]);
        recent.keep(&mut small);
        assert!(recent.take_any(small.as_ref()).is_none());

        let mut msgs: Vec<Msg> = (0..Recent::CAPACITY + 1)
            .map(|i| Msg::from_slice(&[i as u8; 100]))
            .collect();
        for msg in &mut msgs {
            recent.keep(msg);
        }
        assert!(
            recent.take_any(msgs[0].as_ref()).is_none(),
            "the oldest was dropped"
        );
        assert!(recent.take_any(msgs[Recent::CAPACITY].as_ref()).is_some());
        recent.clear();
        assert!(recent.take_any(msgs[1].as_ref()).is_none());
    }

    #[test]
    fn a_socket_that_never_sends_on_stops_keeping_for_a_while() {
        let mut recent = Recent::default();
        let mut msgs: Vec<Msg> = (0..Recent::GIVE_UP as usize + Recent::CAPACITY)
            .map(|i| Msg::from_slice(&[i as u8; 100]))
            .collect();
        for msg in &mut msgs {
            recent.keep(msg);
        }
        // Given up: the next frames are not kept...
        let mut next = Msg::from_slice(&[1u8; 100]);
        recent.keep(&mut next);
        assert!(recent.take_any(next.as_ref()).is_none());
        // ...until the rest is over.
        for _ in 1..Recent::REST {
            recent.keep(&mut next);
        }
        let mut later = Msg::from_slice(&[2u8; 100]);
        recent.keep(&mut later);
        assert!(recent.take_any(later.as_ref()).is_some());
    }

    #[test]
    fn sending_on_keeps_the_socket_keeping() {
        let mut recent = Recent::default();
        for i in 0..10 * Recent::GIVE_UP {
            let mut msg = Msg::from_slice(&[i as u8; 100]);
            recent.keep(&mut msg);
            if i % 2 == 0 {
                assert!(recent.take_any(msg.as_ref()).is_some(), "frame {i}");
            }
        }
    }

    #[test]
    fn a_copied_frame_sends_on_as_the_message_it_was_copied_from() {
        let mut arena = Arena::default();
        let mut recent = Recent::default();
        let msg = Msg::from_slice(&[9u8; 100]);
        let copy = arena.copy(msg.as_ref());
        assert_eq!(&copy[..], &[9u8; 100][..]);
        recent.keep_owned(msg, &copy, &arena);
        // Equal bytes elsewhere (another copy) are not the kept frame.
        let other = arena.copy(&[9u8; 100]);
        assert!(recent.take(&other, &arena).is_none());
        let taken = recent.take(&copy, &arena).expect("found by its copy");
        assert_eq!(taken.as_ref(), &[9u8; 100][..]);
        assert!(recent.take(&copy, &arena).is_none(), "given up once");
    }

    #[test]
    fn a_copy_from_a_chunk_the_arena_left_is_not_taken_for_its_message() {
        let mut arena = Arena::default();
        let mut recent = Recent::default();
        let msg = Msg::from_slice(&[5u8; 100]);
        let copy = arena.copy(msg.as_ref());
        recent.keep_owned(msg, &copy, &arena);
        // Fill the chunk: copies go on in another (or the same, reused), where the address
        // could come back for other bytes.
        let before = arena.generation();
        let _others: Vec<Bytes> = (0..Arena::CHUNK / Arena::MAX_FRAME + 1)
            .map(|_| arena.copy(&[6u8; Arena::MAX_FRAME]))
            .collect();
        assert_ne!(arena.generation(), before, "a chunk was started");
        assert!(recent.take(&copy, &arena).is_none(), "copied, not taken");
    }

    #[test]
    fn a_chunk_whose_copies_are_gone_is_used_again_and_one_still_used_is_not() {
        let mut arena = Arena::default();
        let per_chunk = Arena::CHUNK / Arena::MAX_FRAME;
        let fill = |arena: &mut Arena, byte: u8| -> Vec<Bytes> {
            (0..per_chunk)
                .map(|_| arena.copy(&[byte; Arena::MAX_FRAME]))
                .collect()
        };
        let first = fill(&mut arena, 1);
        let first_start = first[0].as_ptr();
        let second = fill(&mut arena, 2);
        let second_start = second[0].as_ptr();
        drop(first);
        // The first chunk's copies are gone: copies go on in it.
        let third = fill(&mut arena, 3);
        assert_eq!(third[0].as_ptr(), first_start, "reused");
        // The second chunk's copies are alive: a new chunk, and their bytes stay theirs.
        let fourth = arena.copy(&[4; Arena::MAX_FRAME]);
        assert_ne!(fourth.as_ptr(), second_start);
        assert!(second.iter().all(|f| f.iter().all(|&b| b == 2)));
        assert!(third.iter().all(|f| f.iter().all(|&b| b == 3)));
    }

    #[test]
    fn arena_copies_are_distinct_and_survive_many_chunks() {
        let mut arena = Arena::default();
        let frames: Vec<Bytes> = (0..3 * Arena::CHUNK / Arena::MAX_FRAME + 5)
            .map(|i| arena.copy(&vec![i as u8; Arena::MAX_FRAME]))
            .collect();
        for (i, frame) in frames.iter().enumerate() {
            assert_eq!(
                &frame[..],
                &vec![i as u8; Arena::MAX_FRAME][..],
                "frame {i}"
            );
        }
        let mut starts: Vec<usize> = frames.iter().map(|f| f.as_ptr() as usize).collect();
        starts.sort_unstable();
        starts.dedup();
        assert_eq!(starts.len(), frames.len(), "no two frames share bytes");
        assert!(arena.copy(&[]).is_empty());
    }

    #[test]
    fn a_shared_message_outlives_the_original() {
        let mut original = Msg::from_slice(
            b"0123456789012345678901234567890123456789012345678901234567890123456789",
        );
        let shared = original.share().expect("a valid message is shared");
        let expected = original.as_ref().to_vec();
        drop(original);
        assert_eq!(shared.as_ref(), &expected[..]);
    }
}
