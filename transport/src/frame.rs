//! What a send takes as a frame.

use bytes::Bytes;

/// One outbound frame: copied once, straight into libzmq's buffer, when it is sent.
///
/// `Bytes` is a frame; so is `[&[u8]]`, the concatenation of its pieces, which lets a caller
/// that assembles a frame from parts (a header, a name, a payload) skip building it in a
/// buffer of its own first.
pub trait Frame {
    /// Length in bytes.
    fn len(&self) -> usize;

    /// Whether the frame is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the frame into `out`, which is exactly [`len`](Self::len) bytes long.
    fn write_to(&self, out: &mut [u8]);

    /// The frame's bytes when they are already in one piece, so that a frame received from
    /// the same socket and sent on can be recognised and not copied (see the crate docs).
    /// `None` (the default) always copies.
    fn contiguous(&self) -> Option<&[u8]> {
        None
    }

    /// The frame as a `Bytes` of its own, when it is one: the native engine then queues a
    /// large frame as it is, without copying it. `None` (the default) copies.
    fn to_bytes(&self) -> Option<Bytes> {
        None
    }
}

impl Frame for Bytes {
    fn len(&self) -> usize {
        Bytes::len(self)
    }

    fn write_to(&self, out: &mut [u8]) {
        out.copy_from_slice(self);
    }

    fn contiguous(&self) -> Option<&[u8]> {
        Some(self)
    }

    fn to_bytes(&self) -> Option<Bytes> {
        Some(self.clone())
    }
}

impl Frame for [&[u8]] {
    fn len(&self) -> usize {
        self.iter().map(|piece| piece.len()).sum()
    }

    fn write_to(&self, out: &mut [u8]) {
        let mut at = 0;
        // Empty pieces (no metadata, no inline payload) are common: no call for them.
        for piece in self.iter().filter(|piece| !piece.is_empty()) {
            out[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
    }

    fn contiguous(&self) -> Option<&[u8]> {
        // A frame of one piece is in one piece.
        match self {
            [piece] => Some(piece),
            _ => None,
        }
    }
}

impl<F: Frame + ?Sized> Frame for &F {
    fn len(&self) -> usize {
        (**self).len()
    }

    fn write_to(&self, out: &mut [u8]) {
        (**self).write_to(out)
    }

    fn contiguous(&self) -> Option<&[u8]> {
        (**self).contiguous()
    }

    fn to_bytes(&self) -> Option<Bytes> {
        (**self).to_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_of_one_piece_is_contiguous_and_of_several_is_not() {
        let data = b"0123456789";
        let one: &[&[u8]] = &[&data[..]];
        assert_eq!(one.contiguous(), Some(&data[..]));
        let two: &[&[u8]] = &[&data[..4], &data[4..]];
        assert_eq!(two.contiguous(), None);
        assert_eq!(Frame::len(two), data.len());
        let bytes = Bytes::from_static(data);
        assert_eq!(bytes.contiguous(), Some(&data[..]));
    }
}
