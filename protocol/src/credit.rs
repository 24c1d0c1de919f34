//! Flow control for streams: credit counted in items, as pure functions over plain data.
//!
//! The receiver of a stream grants its sender credit (the first grant, right after the
//! request, also states the window) and grants again as it consumes items; the sender sends
//! one item per credit and waits when it has none. So the items a receiver holds never
//! exceed its window, and since each item is bounded by the payload limit, a stream costs
//! its receiver at most `window x max payload` bytes. Nothing here does I/O or reads a
//! clock: the conversation feeds in what arrived and sends what these say.
//!
//! The rule, both sides:
//! - the receiver opens with a window (at most [`MAX_WINDOW`] items) and a first grant of
//!   up to [`FIRST_GRANT`] items; as it consumes items it grants again, aiming to have
//!   about [`BYTE_TARGET`] bytes on the way or held (estimated from the items' sizes so
//!   far), within the window, once that allows at least half its aim more (one grant per
//!   half aim, not one per item). Small items so get the whole window, large ones a few;
//! - an item arriving when the receiver has no credit outstanding is a [`Violation`];
//! - a grant that would give the sender more credit than the window is a [`Violation`] (a
//!   sender cannot be owed more than the receiver can hold).
//!
//! Why bytes as well as items: a window of 256 items held small items to 0.85 of the
//! one-way tick rate (the sender waited for credit), 1,024 let them pass it; and a window
//! of 256 held 64 KiB items to a third of the TCP floor (16 MiB in flight), so large items
//! get fewer; PERFORMANCE.md, "Streams".

/// The window a stream's receiver grants when none is configured: 1,024 items.
pub const DEFAULT_WINDOW: u32 = 1024;

/// The largest window a receiver may grant (bounds what a peer can ask a sender to believe
/// it holds, and keeps counts far from overflowing).
pub const MAX_WINDOW: u32 = 1 << 20;

/// The first grant, before any item's size is known: 32 items (at most the window).
pub const FIRST_GRANT: u32 = 32;

/// The bytes a receiver aims to have on the way or held per stream, once it has seen
/// items: 2 MiB (32 items of 64 KiB).
pub const BYTE_TARGET: u64 = 2 << 20;

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
        /// The window (stated by the first grant).
        window: u32,
    },
    /// A first grant stating a window of zero items or over [`MAX_WINDOW`], or granting
    /// more than it.
    #[error("a window of {0} items (1 to {MAX_WINDOW} allowed, granted within it)")]
    BadWindow(u32),
    /// A credit message whose payload is not a 4-byte count (or, first, a window and a
    /// count).
    #[error("a credit message of {0} bytes (4, or 8 first, expected)")]
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

    /// A credit message arrived: a first one states the window (`[window, n]`, or `[n]`
    /// for a window of `n`), a later one grants `n` more (`[n]`).
    pub fn receive(&mut self, payload: &[u8]) -> Result<(), Violation> {
        match (self.window, payload.len()) {
            (None, 8) => {
                let (window, n) = payload.split_at(4);
                self.open(be_u32(window), be_u32(n))
            }
            (_, 4) => self.grant(be_u32(payload)),
            (_, len) => Err(Violation::BadCredit(len)),
        }
    }

    /// The receiver's first grant: a window of `window` items, `n` of them granted now.
    pub fn open(&mut self, window: u32, n: u32) -> Result<(), Violation> {
        if window == 0 || window > MAX_WINDOW || n > window || self.window.is_some() {
            return Err(Violation::BadWindow(window));
        }
        self.window = Some(window);
        self.available = n;
        Ok(())
    }

    /// The receiver granted `n` items. A first grant sets the window to `n`; a later one
    /// may not bring the credit above the window.
    pub fn grant(&mut self, n: u32) -> Result<(), Violation> {
        match self.window {
            None => self.open(n, n),
            Some(window) => {
                let total = u64::from(self.available) + u64::from(n);
                if total > u64::from(window) {
                    return Err(Violation::CreditBeyondWindow { granted: n, window });
                }
                self.available += n;
                Ok(())
            }
        }
    }
}

/// A 4-byte big-endian count (callers pass exactly 4 bytes).
fn be_u32(bytes: &[u8]) -> u32 {
    bytes.try_into().map(u32::from_be_bytes).unwrap_or(0)
}

/// A receiver's first grant: its window and the items granted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opening {
    /// The window: the most credit the sender may ever hold.
    pub window: u32,
    /// Items granted now.
    pub granted: u32,
}

impl Opening {
    /// The credit message's payload: the window, then the grant, each 4 bytes big-endian.
    pub fn payload(&self) -> [u8; 8] {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&self.window.to_be_bytes());
        bytes[4..].copy_from_slice(&self.granted.to_be_bytes());
        bytes
    }
}

/// The receiving side's window: credit outstanding, items held, and when to grant again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The window stated at the start: the most items on the way or held.
    size: u32,
    /// Credit granted and not yet used by an arrived item.
    outstanding: u32,
    /// Items arrived and not yet consumed.
    held: u32,
    /// The items' size so far, smoothed (bytes x 8, so small sizes keep their precision);
    /// `None` before the first item.
    mean_x8: Option<u64>,
}

impl Window {
    /// A window of `size` items (clamped to `1..=MAX_WINDOW`), not granted yet: the first
    /// grant is [`open`](Self::open).
    pub fn new(size: u32) -> Window {
        Window {
            size: size.clamp(1, MAX_WINDOW),
            outstanding: 0,
            held: 0,
            mean_x8: None,
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

    /// The first grant, to send right after the request (or on receiving it, for a body):
    /// the window, and [`FIRST_GRANT`] items of it.
    pub fn open(&mut self) -> Opening {
        let granted = self.size.min(FIRST_GRANT);
        self.outstanding = granted;
        Opening {
            window: self.size,
            granted,
        }
    }

    /// An item of `len` bytes arrived: it uses one credit, or it is a violation (the sender
    /// had none).
    pub fn arrive(&mut self, len: usize) -> Result<(), Violation> {
        if self.outstanding == 0 {
            return Err(Violation::ItemWithoutCredit);
        }
        self.outstanding -= 1;
        self.held += 1;
        let len_x8 = (len as u64).saturating_mul(8);
        // A moving mean over about the last 8 items: a stream whose items grow is
        // throttled within a few of them.
        self.mean_x8 = Some(match self.mean_x8 {
            None => len_x8,
            Some(mean) => mean - mean / 8 + len_x8 / 8,
        });
        Ok(())
    }

    /// How many items the receiver aims to have on the way or held: [`BYTE_TARGET`] over
    /// the items' mean size, within the window (before any item: the first grant).
    fn aim(&self) -> u32 {
        match self.mean_x8 {
            None => self.size.min(FIRST_GRANT),
            Some(mean_x8) => {
                let items = BYTE_TARGET.saturating_mul(8) / mean_x8.max(1);
                u32::try_from(items).unwrap_or(u32::MAX).clamp(1, self.size)
            }
        }
    }

    /// The user consumed one held item. Returns the credit to grant now, if any: enough to
    /// bring the items on the way or held up to the aim, once that is at least half of it.
    pub fn consume(&mut self) -> Option<u32> {
        self.held = self.held.saturating_sub(1);
        let aim = self.aim();
        let in_flight = self.outstanding + self.held;
        let room = aim.saturating_sub(in_flight);
        if room > 0 && room >= (aim / 2).max(1) {
            self.outstanding += room;
            return Some(room);
        }
        None
    }
}

/// Encodes a later grant as a credit message's payload.
pub(crate) fn encode_grant(n: u32) -> [u8; 4] {
    n.to_be_bytes()
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
    fn a_first_grant_must_state_a_window_it_fits_in() {
        assert_eq!(Credit::new().grant(0), Err(Violation::BadWindow(0)));
        assert_eq!(
            Credit::new().grant(MAX_WINDOW + 1),
            Err(Violation::BadWindow(MAX_WINDOW + 1))
        );
        let opening = |window: u32, n: u32| Opening { window, granted: n }.payload();
        assert_eq!(
            Credit::new().receive(&opening(4, 5)),
            Err(Violation::BadWindow(4))
        );
        assert_eq!(
            Credit::new().receive(&opening(0, 0)),
            Err(Violation::BadWindow(0))
        );
        // A window stated twice.
        let mut credit = Credit::new();
        credit.receive(&opening(8, 2)).unwrap();
        assert_eq!(credit.receive(&opening(8, 2)), Err(Violation::BadCredit(8)));
    }

    #[test]
    fn an_opening_grants_part_of_its_window_and_later_grants_fill_it() {
        let mut credit = Credit::new();
        credit
            .receive(
                &Opening {
                    window: 8,
                    granted: 2,
                }
                .payload(),
            )
            .unwrap();
        assert_eq!((credit.window(), credit.available()), (Some(8), 2));
        credit.receive(&encode_grant(6)).unwrap();
        assert_eq!(credit.available(), 8);
        assert!(matches!(
            credit.receive(&encode_grant(1)),
            Err(Violation::CreditBeyondWindow { .. })
        ));
        assert_eq!(credit.receive(&[1, 2]), Err(Violation::BadCredit(2)));
    }

    #[test]
    fn an_item_without_credit_is_a_violation() {
        let mut window = Window::new(2);
        assert_eq!(window.arrive(1), Err(Violation::ItemWithoutCredit));
        assert_eq!(window.open().granted, 2);
        window.arrive(1).unwrap();
        window.arrive(1).unwrap();
        assert_eq!(window.arrive(1), Err(Violation::ItemWithoutCredit));
        assert_eq!(window.held(), 2);
    }

    #[test]
    fn the_receiver_grants_per_half_window_consumed() {
        let mut window = Window::new(8);
        window.open();
        for _ in 0..8 {
            window.arrive(100).unwrap();
        }
        assert_eq!(window.consume(), None);
        assert_eq!(window.consume(), None);
        assert_eq!(window.consume(), None);
        assert_eq!(window.consume(), Some(4));
        assert_eq!(window.held(), 4);
        // The grant lets exactly four more in.
        for _ in 0..4 {
            window.arrive(100).unwrap();
        }
        assert_eq!(window.arrive(100), Err(Violation::ItemWithoutCredit));
    }

    #[test]
    fn a_window_of_one_grants_per_item() {
        let mut window = Window::new(0);
        assert_eq!(window.size(), 1);
        window.open();
        window.arrive(10).unwrap();
        assert_eq!(window.consume(), Some(1));
    }

    /// Drains `window` of everything granted, returning the items on the way or held after.
    fn settle(window: &mut Window, item: usize, rounds: usize) -> u32 {
        let mut on_the_way = window.open().granted;
        for _ in 0..rounds {
            for _ in 0..on_the_way {
                window.arrive(item).unwrap();
            }
            on_the_way = 0;
            while window.held() > 0 {
                if let Some(grant) = window.consume() {
                    on_the_way += grant;
                }
            }
        }
        on_the_way
    }

    #[test]
    fn small_items_get_the_whole_window_and_large_ones_about_the_byte_target() {
        let mut small = Window::new(DEFAULT_WINDOW);
        assert_eq!(small.open().granted, FIRST_GRANT);
        let mut small = Window::new(DEFAULT_WINDOW);
        assert_eq!(settle(&mut small, 100, 4), DEFAULT_WINDOW);

        let mut large = Window::new(DEFAULT_WINDOW);
        let in_flight = settle(&mut large, 64 << 10, 4);
        assert_eq!(u64::from(in_flight) * (64 << 10), BYTE_TARGET);

        // Items over the target: one at a time, never none.
        let mut huge = Window::new(DEFAULT_WINDOW);
        assert_eq!(settle(&mut huge, 16 << 20, 4), 1);
    }

    #[test]
    fn items_that_grow_are_throttled_within_a_few_items() {
        let mut window = Window::new(DEFAULT_WINDOW);
        assert_eq!(settle(&mut window, 100, 4), DEFAULT_WINDOW);
        // The sender switches to 1 MiB items: the grants stop until the aim (2 items) is
        // above what is already on the way.
        let mut granted_after = 0;
        for _ in 0..DEFAULT_WINDOW {
            window.arrive(1 << 20).unwrap();
        }
        while window.held() > 0 {
            if let Some(grant) = window.consume() {
                granted_after += grant;
            }
        }
        assert!(
            granted_after <= 2,
            "granted {granted_after} more 1 MiB items"
        );
    }

    /// Sender and receiver driven together: the receiver never holds more than its window,
    /// whatever the order of sends and consumptions and the items' sizes, and the sender
    /// never sees a violation.
    #[test]
    fn sender_and_receiver_together_stay_within_the_window() {
        let mut credit = Credit::new();
        let mut window = Window::new(5);
        credit.receive(&window.open().payload()).unwrap();
        let mut in_flight = 0u32;
        let mut delivered = 0u32;
        // A fixed pseudo-random schedule of steps: send, deliver, consume.
        let mut seed = 7u32;
        for _ in 0..10_000 {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let size = [10usize, 1 << 20, 300_000][(seed >> 8) as usize % 3];
            match (seed >> 16) % 3 {
                0 if credit.take() => in_flight += 1,
                1 if in_flight > 0 => {
                    in_flight -= 1;
                    window.arrive(size).unwrap();
                }
                2 if window.held() > 0 => {
                    delivered += 1;
                    if let Some(grant) = window.consume() {
                        credit.receive(&encode_grant(grant)).unwrap();
                    }
                }
                _ => {}
            }
            assert!(window.held() + in_flight <= 5);
        }
        assert!(delivered > 1000);
    }
}
