//! Buffers for outgoing frames, recycled instead of freed by libzmq's I/O thread.
//!
//! A frame sent as a fresh libzmq message (`zmq_msg_init_size`) is allocated by the thread
//! that sends and freed by libzmq's I/O thread once written to the connection. On a busy
//! socket the two threads then contend for glibc's arena lock (measured with `perf stat`:
//! 0.15 `futex` calls per request on the protocol echo server and on its client, 100 in
//! flight, 500-1000 B; each is a system call, and often a sleep). Here a frame's bytes go
//! into a buffer of a size class (64 B to 64 KiB) handed to libzmq; when libzmq is done with
//! it, its free callback puts the buffer back on the class's list instead of freeing it, and
//! senders take buffers from there again.
//!
//! Each buffer starts with room for libzmq's message header ([`HEADER`] bytes), which libzmq
//! would otherwise `malloc` per message with `zmq_msg_init_data` and free on its I/O thread:
//! that cross-thread pair went through glibc's shared fast bins and took 10% of a busy
//! client's time (perf, transport client, 100 B, 1000 in flight). The message is made with
//! `zeronode_msg_init_external` (our libzmq's one exported addition, see
//! `third_party/zmq-sys`), so sending a pooled frame allocates nothing. Built against a
//! libzmq without it (the published zmq-sys: see `build.rs`), libzmq allocates the header as
//! `zmq_msg_init_data` does, and the header room goes unused.
//!
//! The lists are process-wide (libzmq's callback carries only the size class). Each keeps
//! at most [`KEEP`] buffers; beyond that a returned buffer is freed. A socket takes a batch
//! of at most [`BATCH_BYTES`] at once into its own spares (one lock per batch, not per
//! frame) and frees its spares when it closes.

#![allow(unsafe_code)]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::c_void;
use std::ptr::NonNull;

use parking_lot::Mutex;

/// log2 of the smallest class (64 B).
const MIN_SHIFT: u32 = 6;
/// Number of classes: 64 B, 128 B, ..., 64 KiB.
const CLASSES: usize = 11;
/// Bytes at the start of every buffer kept for libzmq's message header: its `content_t`
/// ([`zmq_sys::ZERONODE_MSG_CONTENT_SIZE`] bytes), rounded up to keep the frame's bytes
/// 64-byte aligned.
pub(crate) const HEADER: usize = 64;
#[cfg(zmq_msg_init_external)]
const _: () = assert!(zmq_sys::ZERONODE_MSG_CONTENT_SIZE <= HEADER);
/// Frames above this are not pooled (copied into a message libzmq allocates, as before).
pub(crate) const MAX_POOLED: usize = (1 << (MIN_SHIFT as usize + CLASSES - 1)) - HEADER;
/// Buffers kept per class on the shared lists.
pub(crate) const KEEP: usize = 1024;
/// Bytes of buffers a socket takes from a shared list at once (and so holds at most, per
/// class, in its spares).
pub(crate) const BATCH_BYTES: usize = 64 * 1024;

/// A buffer of one class's size, owned by whoever holds this value (or by libzmq while a
/// message points to it).
pub(crate) struct Buffer(NonNull<u8>);

// SAFETY: a Buffer is a plain heap allocation with no thread affinity; whoever holds it owns
// it exclusively.
unsafe impl Send for Buffer {}

/// Buffers given back by libzmq, per class.
static RETURNED: [Mutex<Vec<Buffer>>; CLASSES] = [const { Mutex::new(Vec::new()) }; CLASSES];

/// The class whose buffers hold a frame of `len` bytes after the header, if `len` is pooled.
pub(crate) fn class_of(len: usize) -> Option<usize> {
    if len > MAX_POOLED {
        return None;
    }
    let size = len + HEADER;
    let bits = usize::BITS - size.saturating_sub(1).leading_zeros();
    Some(bits.saturating_sub(MIN_SHIFT) as usize)
}

/// Size in bytes of the buffers of `class`.
pub(crate) fn capacity(class: usize) -> usize {
    1 << (MIN_SHIFT as usize + class)
}

fn layout(class: usize) -> Layout {
    // The sizes are powers of two up to 64 KiB with an alignment of 16: always valid.
    Layout::from_size_align(capacity(class), 16).unwrap_or(Layout::new::<[u8; 16]>())
}

impl Buffer {
    /// A new buffer of `class`, zeroed (so its bytes are initialised from the start; it is
    /// allocated once and recycled).
    fn allocate(class: usize) -> Buffer {
        let layout = layout(class);
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        match NonNull::new(ptr) {
            Some(ptr) => Buffer(ptr),
            None => std::alloc::handle_alloc_error(layout),
        }
    }

    /// Frees a buffer of `class`.
    fn free(self, class: usize) {
        // SAFETY: allocated by `allocate` with the same class, hence the same layout, and
        // owned by us (`self` is consumed).
        unsafe { dealloc(self.0.as_ptr(), layout(class)) }
    }

    /// The buffer's bytes after the header, `capacity(class) - HEADER` of them: where the
    /// frame goes.
    pub(crate) fn frame_mut(&mut self, class: usize) -> &mut [u8] {
        // SAFETY: the allocation is `capacity(class)` bytes (at least 64, so more than
        // HEADER), initialised (zeroed when allocated, written since), and exclusively ours.
        unsafe {
            std::slice::from_raw_parts_mut(self.0.as_ptr().add(HEADER), capacity(class) - HEADER)
        }
    }

    /// Asks the CPU to fetch the buffer's first lines (libzmq's header and the start of the
    /// frame) for writing, ahead of the send that will write them.
    ///
    /// A buffer comes back from libzmq's I/O thread, which wrote its header last (the
    /// reference count) and read its frame, so those lines sit in the other core's cache:
    /// the send that writes them stalls on the transfer (perf, transport client at 100 B,
    /// 1000 in flight: 14% of its main thread's time at the first load after the header is
    /// written). Prefetching the next spare when taking one overlaps that transfer with the
    /// rest of the send: +3-5% round trips/s there (alternating runs), no change at 100 in
    /// flight. `prefetchw` is a hint (a no-op where unsupported); it never faults.
    fn prefetch_for_write(&self, class: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            const LINE: usize = 64;
            let start = self.0.as_ptr();
            for offset in (0..capacity(class).min(4 * LINE)).step_by(LINE) {
                // SAFETY: a prefetch reads and writes nothing and cannot fault; the address
                // is inside the buffer anyway.
                unsafe {
                    std::arch::asm!(
                        "prefetchw [{0}]",
                        in(reg) start.wrapping_add(offset),
                        options(nostack, preserves_flags, readonly)
                    )
                };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = class;
    }

    /// Hands the buffer to libzmq for a message: the header's address (for libzmq's
    /// `content_t`) and the frame's. `give_back` with the frame's address and
    /// `hint(class)` gives it back.
    pub(crate) fn into_raw(self) -> (*mut c_void, *mut c_void) {
        let start = self.0.as_ptr();
        // SAFETY: HEADER is within the allocation (see `frame_mut`).
        (start.cast(), unsafe { start.add(HEADER) }.cast())
    }
}

/// What libzmq calls with `zmq_msg_init_data`'s hint.
pub(crate) fn hint(class: usize) -> *mut c_void {
    class as *mut c_void
}

/// libzmq's free callback for pooled messages (called on whichever thread closes the
/// message, usually libzmq's I/O thread): the buffer goes back on its class's list.
///
/// # Safety
/// `data` must be the frame's address from [`Buffer::into_raw`] of a buffer of the class in
/// `hint`, and the buffer not be used again by the caller.
pub(crate) unsafe extern "C" fn give_back(data: *mut c_void, hint: *mut c_void) {
    let class = hint as usize;
    if data.is_null() || class >= CLASSES {
        // Not ours; cannot happen (we only pass frames of pooled buffers and class hints).
        // Leak rather than guess.
        return;
    }
    // SAFETY: the frame starts HEADER bytes into its buffer (the caller's contract).
    let Some(ptr) = NonNull::new(unsafe { data.cast::<u8>().sub(HEADER) }) else {
        return;
    };
    let buffer = Buffer(ptr);
    let mut list = RETURNED[class].lock();
    if list.len() < KEEP {
        list.push(buffer);
    } else {
        drop(list);
        buffer.free(class);
    }
}

/// A socket's own buffers, taken from the shared lists a batch at a time.
#[derive(Default)]
pub(crate) struct Spares {
    lists: [Vec<Buffer>; CLASSES],
}

impl Spares {
    /// A buffer of `class`: a spare, else a batch from the shared list (one lock), else a
    /// new one. A batch is at most [`BATCH_BYTES`] of buffers (and at least one), so what a
    /// socket holds in spares stays small however many sockets share the lists.
    pub(crate) fn take(&mut self, class: usize) -> Buffer {
        let list = &mut self.lists[class];
        if let Some(buffer) = list.pop() {
            if let Some(next) = list.last() {
                next.prefetch_for_write(class);
            }
            return buffer;
        }
        {
            let mut shared = RETURNED[class].lock();
            let batch = (BATCH_BYTES / capacity(class)).max(1).min(shared.len());
            let from = shared.len() - batch;
            list.extend(shared.drain(from..));
        }
        list.pop().unwrap_or_else(|| Buffer::allocate(class))
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        for (class, list) in self.lists.iter_mut().enumerate() {
            for buffer in list.drain(..) {
                buffer.free(class);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_fit_their_lengths_and_stop_at_the_largest() {
        // The header comes first: 64 B buffers hold empty frames only.
        assert_eq!(class_of(0), Some(0));
        assert_eq!(class_of(1), Some(1));
        assert_eq!(class_of(64), Some(1));
        assert_eq!(class_of(65), Some(2));
        assert_eq!(class_of(960), Some(4));
        assert_eq!(class_of(961), Some(5));
        assert_eq!(capacity(4), 1024);
        assert_eq!(class_of(MAX_POOLED), Some(CLASSES - 1));
        assert_eq!(class_of(MAX_POOLED + 1), None);
        for len in [1, 63, 64, 65, 100, 1000, 1024, 1025, 4096, MAX_POOLED] {
            let class = class_of(len).expect("pooled");
            assert!(capacity(class) >= len + HEADER, "{len} fits class {class}");
            assert!(
                class == 0 || capacity(class - 1) < len + HEADER,
                "{len}: smallest class"
            );
        }
    }

    #[test]
    fn a_socket_takes_a_bounded_batch_and_leaves_the_rest_shared() {
        // A class no other test in this process uses, so the shared list is ours.
        let class = CLASSES - 1;
        let per_batch = (BATCH_BYTES / capacity(class)).max(1);
        let mut first = Spares::default();
        let buffers: Vec<Buffer> = (0..per_batch + 3).map(|_| first.take(class)).collect();
        for buffer in buffers {
            // SAFETY: buffers of `class`, not used again here.
            unsafe { give_back(buffer.into_raw().1, hint(class)) };
        }
        let mut second = Spares::default();
        let taken = second.take(class);
        assert_eq!(
            second.lists[class].len(),
            per_batch - 1,
            "one batch, one handed out"
        );
        assert_eq!(RETURNED[class].lock().len(), 3, "the rest stays shared");
        taken.free(class);
    }

    #[test]
    fn a_buffer_given_back_is_taken_again() {
        // A class no other test in this process uses, so the shared list is ours.
        let class = CLASSES - 2;
        let mut spares = Spares::default();
        let mut buffer = spares.take(class);
        buffer.frame_mut(class)[..3].copy_from_slice(b"abc");
        let address = buffer.0;
        // SAFETY: a buffer of `class`, not used again here.
        unsafe { give_back(buffer.into_raw().1, hint(class)) };
        let again = spares.take(class);
        assert_eq!(again.0, address, "recycled, not allocated");
        again.free(class);
    }
}
