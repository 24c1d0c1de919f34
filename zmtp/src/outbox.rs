//! Bytes waiting to be written: small pieces copied into one buffer, large payloads kept as
//! the caller's `Bytes`, so a driver writes everything queued in one vectored write.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};

/// A payload at least this long that comes as `Bytes` is queued as it is, not copied: below
/// it, one more iovec entry costs more than the copy (a memcpy of 8 KiB is about 0.3 µs
/// here; writev's per-entry cost grows with the entries, and small frames are most frames).
pub(crate) const ZERO_COPY_MIN: usize = 8 * 1024;

/// What a driver has to write, in order.
#[derive(Debug, Default)]
pub struct Outbox {
    /// Whole pieces, written before `tail`.
    chunks: VecDeque<Bytes>,
    /// The bytes in `chunks`: with `tail`'s length, all that is queued.
    chunked: usize,
    /// Where headers and small frames are copied; written after `chunks`.
    tail: BytesMut,
}

impl Outbox {
    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.chunked + self.tail.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer small pieces are copied into, after everything queued so far.
    pub(crate) fn tail(&mut self) -> &mut BytesMut {
        &mut self.tail
    }

    /// Queues `bytes` as one piece, after everything queued so far.
    pub(crate) fn push_bytes(&mut self, bytes: Bytes) {
        if !self.tail.is_empty() {
            let copied = self.tail.split().freeze();
            self.chunked += copied.len();
            self.chunks.push_back(copied);
        }
        self.chunked += bytes.len();
        self.chunks.push_back(bytes);
    }

    /// Fills `slices` with what to write next; returns how many it filled.
    pub fn io_slices<'a>(&'a self, slices: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for chunk in self.chunks.iter().filter(|c| !c.is_empty()) {
            if n == slices.len() {
                return n;
            }
            slices[n] = IoSlice::new(chunk);
            n += 1;
        }
        if n < slices.len() && !self.tail.is_empty() {
            slices[n] = IoSlice::new(&self.tail);
            n += 1;
        }
        n
    }

    /// Drops the first `n` bytes, which were written.
    pub fn advance(&mut self, mut n: usize) {
        debug_assert!(n <= self.len());
        while n > 0 {
            match self.chunks.front_mut() {
                Some(chunk) if chunk.len() <= n => {
                    n -= chunk.len();
                    self.chunked -= chunk.len();
                    self.chunks.pop_front();
                }
                Some(chunk) => {
                    chunk.advance(n);
                    self.chunked -= n;
                    return;
                }
                None => {
                    let k = n.min(self.tail.len());
                    self.tail.advance(k);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(outbox: &Outbox) -> Vec<u8> {
        let mut slices = [IoSlice::new(&[]); 8];
        let n = outbox.io_slices(&mut slices);
        slices[..n].iter().flat_map(|s| s.iter().copied()).collect()
    }

    #[test]
    fn pieces_come_out_in_order_and_advance_across_them() {
        let mut outbox = Outbox::default();
        outbox.tail().extend_from_slice(b"ab");
        outbox.push_bytes(Bytes::from_static(b"cdef"));
        outbox.tail().extend_from_slice(b"gh");
        assert_eq!(written(&outbox), b"abcdefgh");
        assert_eq!(outbox.len(), 8);
        outbox.advance(3);
        assert_eq!(written(&outbox), b"defgh");
        outbox.advance(4);
        assert_eq!(written(&outbox), b"h");
        outbox.advance(1);
        assert!(outbox.is_empty());
        assert_eq!(written(&outbox), b"");
    }
}
