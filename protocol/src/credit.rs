//! Flow control for streams: credit counted in items, as pure functions over plain data.
//!
//! The receiver of a stream grants its sender a window of items (the first grant, right
//! after the request) and grants again as it consumes them; the sender sends one item per
//! credit and waits when it has none. So the items a receiver holds never exceed its window,
//! and since each item is bounded by the payload limit, a stream costs its receiver at most
//! `window x max payload` bytes. Nothing here does I/O or reads a clock: the conversation
//! feeds in what arrived and sends what these say.
//!
//! The rule, both sides:
//! - the receiver grants `window` at the start, then the number of items consumed whenever
//!   that reaches half the window (one grant per half window, not one per item);
//! - an item arriving when the receiver has no credit outstanding is a [`Violation`];
//! - a grant that would give the sender more credit than the window is a [`Violation`] (a
//!   sender cannot be owed more than the receiver can hold).

/// The window a stream's receiver grants when none is configured: 32 items.
pub const DEFAULT_WINDOW: u32 = 32;

/// The largest window a receiver may grant (bounds what a peer can ask a sender to believe
/// it holds, and keeps counts far from overflowing).
pub const MAX_WINDOW: u32 = 1 << 20;

/// A peer broke the stream rules: the stream ends with this (typed, counted), the
/// conversation goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// An item arrived while the receiver had granted no credit for it.
    #[error("a stream item arrived without credit")]
    ItemWithoutCredit,
    /// A grant would give the sender more credit than the window.
    #[error("a credit grant of {granted} would exceed the window of {window}")]
    CreditBeyondWindow {
        /// Items granted by the message.
        granted: u32,
        /// The window (the first grant).
        window: u32,
    },
    /// A first grant of zero items or over [`MAX_WINDOW`].
    #[error("a window of {0} items (1 to {MAX_WINDOW} allowed)")]
    BadWindow(u32),
    /// A credit message whose payload is not a 4-byte count.
    #[error("a credit message of {0} bytes (4 expected)")]
    BadCredit(usize),
    /// A stream item over the payload limit.
    #[error("a stream item of {size} bytes exceeds the maximum of {max}")]
    ItemTooLarge {
        /// The item's size.
        size: usize,
        /// The receiver's limit.
        max: usize,
    },
    /// A streamed request reused the id of a stream still open with the same peer.
    #[error("a stream id reused while its stream is open")]
    ReusedId,
    /// An end-of-body item with a payload (it must carry none).
    #[error("an end-of-body item carries a payload")]
    BadEnd,
}

/// The sending side's credit: how many items it may send now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Credit {
    /// The receiver's window, set by its first grant (`None`: nothing granted yet).
    window: Option<u32>,
    /// Items the sender may send now.
    available: u32,
}

impl Credit {
    /// No credit yet: the sender waits for the receiver's first grant.
    pub fn new() -> Credit {
        Credit::default()
    }

    /// Items the sender may send now.
    pub fn available(&self) -> u32 {
        self.available
    }

    /// The receiver's window, once it granted one.
    pub fn window(&self) -> Option<u32> {
        self.window
    }

    /// Takes one credit to send an item: `false` (nothing taken) when there is none.
    pub fn take(&mut self) -> bool {
        if self.available == 0 {
            return false;
        }
        self.available -= 1;
        true
    }

    /// The receiver granted `n` items. The first grant sets the window; a later one may not
    /// bring the credit above it.
    pub fn grant(&mut self, n: u32) -> Result<(), Violation> {
        match self.window {
            None => {
                if n == 0 || n > MAX_WINDOW {
                    return Err(Violation::BadWindow(n));
                }
                self.window = Some(n);
                self.available = n;
            }
            Some(window) => {
                let total = u64::from(self.available) + u64::from(n);
                if total > u64::from(window) {
                    return Err(Violation::CreditBeyondWindow { granted: n, window });
                }
                self.available += n;
            }
        }
        Ok(())
    }
}

/// The receiving side's window: credit outstanding, items held, and when to grant again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The window granted at the start.
    size: u32,
    /// Credit granted and not yet used by an arrived item.
    outstanding: u32,
    /// Items arrived and not yet consumed.
    held: u32,
    /// Items consumed since the last grant.
    consumed: u32,
}

impl Window {
    /// A window of `size` items (clamped to `1..=MAX_WINDOW`), not granted yet: the first
    /// grant is [`open`](Self::open).
    pub fn new(size: u32) -> Window {
        Window {
            size: size.clamp(1, MAX_WINDOW),
            outstanding: 0,
            held: 0,
            consumed: 0,
        }
    }

    /// The window's size.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Items arrived and not consumed yet (never more than the window).
    pub fn held(&self) -> u32 {
        self.held
    }

    /// The first grant: the whole window, to send right after the request (or on receiving
    /// it, for a body).
    pub fn open(&mut self) -> u32 {
        self.outstanding = self.size;
        self.size
    }

    /// An item arrived: it uses one credit, or it is a violation (the sender had none).
    pub fn arrive(&mut self) -> Result<(), Violation> {
        if self.outstanding == 0 {
            return Err(Violation::ItemWithoutCredit);
        }
        self.outstanding -= 1;
        self.held += 1;
        Ok(())
    }

    /// The user consumed one held item. Returns the credit to grant now, if any: the items
    /// consumed since the last grant, once they reach half the window.
    pub fn consume(&mut self) -> Option<u32> {
        self.held = self.held.saturating_sub(1);
        self.consumed += 1;
        if self.consumed >= (self.size / 2).max(1) {
            let grant = std::mem::take(&mut self.consumed);
            self.outstanding += grant;
            return Some(grant);
        }
        None
    }
}

/// Encodes a grant as a credit message's payload.
pub(crate) fn encode_grant(n: u32) -> [u8; 4] {
    n.to_be_bytes()
}

/// Decodes a credit message's payload.
pub(crate) fn decode_grant(payload: &[u8]) -> Result<u32, Violation> {
    let bytes: [u8; 4] = payload
        .try_into()
        .map_err(|_| Violation::BadCredit(payload.len()))?;
    Ok(u32::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_waits_for_the_first_grant_then_sends_one_item_per_credit() {
        let mut credit = Credit::new();
        assert!(!credit.take());
        credit.grant(2).unwrap();
        assert_eq!(credit.window(), Some(2));
        assert!(credit.take());
        assert!(credit.take());
        assert!(!credit.take());
        credit.grant(1).unwrap();
        assert!(credit.take());
    }

    #[test]
    fn a_grant_beyond_the_window_is_a_violation() {
        let mut credit = Credit::new();
        credit.grant(4).unwrap();
        assert!(credit.take());
        assert_eq!(
            credit.grant(2),
            Err(Violation::CreditBeyondWindow {
                granted: 2,
                window: 4
            })
        );
        // Nothing changed by the refused grant.
        assert_eq!(credit.available(), 3);
        credit.grant(1).unwrap();
        assert_eq!(credit.available(), 4);
        assert!(credit.grant(u32::MAX).is_err());
    }

    #[test]
    fn a_first_grant_must_be_a_window() {
        assert_eq!(Credit::new().grant(0), Err(Violation::BadWindow(0)));
        assert_eq!(
            Credit::new().grant(MAX_WINDOW + 1),
            Err(Violation::BadWindow(MAX_WINDOW + 1))
        );
    }

    #[test]
    fn an_item_without_credit_is_a_violation() {
        let mut window = Window::new(2);
        assert_eq!(window.arrive(), Err(Violation::ItemWithoutCredit));
        assert_eq!(window.open(), 2);
        window.arrive().unwrap();
        window.arrive().unwrap();
        assert_eq!(window.arrive(), Err(Violation::ItemWithoutCredit));
        assert_eq!(window.held(), 2);
    }

    #[test]
    fn the_receiver_grants_per_half_window_consumed() {
        let mut window = Window::new(8);
        window.open();
        for _ in 0..8 {
            window.arrive().unwrap();
        }
        assert_eq!(window.consume(), None);
        assert_eq!(window.consume(), None);
        assert_eq!(window.consume(), None);
        assert_eq!(window.consume(), Some(4));
        assert_eq!(window.held(), 4);
        // The grant lets exactly four more in.
        for _ in 0..4 {
            window.arrive().unwrap();
        }
        assert_eq!(window.arrive(), Err(Violation::ItemWithoutCredit));
    }

    #[test]
    fn a_window_of_one_grants_per_item() {
        let mut window = Window::new(0);
        assert_eq!(window.size(), 1);
        window.open();
        window.arrive().unwrap();
        assert_eq!(window.consume(), Some(1));
    }

    /// Sender and receiver driven together: the receiver never holds more than its window,
    /// whatever the order of sends and consumptions, and the sender never sees a violation.
    #[test]
    fn sender_and_receiver_together_stay_within_the_window() {
        let mut credit = Credit::new();
        let mut window = Window::new(5);
        credit.grant(window.open()).unwrap();
        let mut in_flight = 0u32;
        let mut delivered = 0u32;
        // A fixed pseudo-random schedule of steps: send, deliver, consume.
        let mut seed = 7u32;
        for _ in 0..10_000 {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            match (seed >> 16) % 3 {
                0 if credit.take() => in_flight += 1,
                1 if in_flight > 0 => {
                    in_flight -= 1;
                    window.arrive().unwrap();
                }
                2 if window.held() > 0 => {
                    delivered += 1;
                    if let Some(grant) = window.consume() {
                        credit.grant(grant).unwrap();
                    }
                }
                _ => {}
            }
            assert!(window.held() + in_flight <= 5);
        }
        assert!(delivered > 1000);
    }

    #[test]
    fn grants_encode_as_four_bytes() {
        assert_eq!(decode_grant(&encode_grant(32)), Ok(32));
        assert_eq!(decode_grant(&[1, 2]), Err(Violation::BadCredit(2)));
    }
}
