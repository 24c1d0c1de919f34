//! The protocol's own messages: the `_system:*` events a node sends and answers, as one
//! type decoded once from the event name, and one file per message with its parse (the
//! payload it carries) and its effect on the node.
//!
//! | message | kind | payload | effect (file) |
//! |---|---|---|---|
//! | `_system:handshake` | request | a `Hello` | admit the peer, answer our `Hello` (`handshake.rs`) |
//! | `_system:heartbeat` | tick | none | a sign of life (`heartbeat.rs`) |
//! | `_system:options` | tick | the sender's new options | update the peer, say so (`options.rs`) |
//! | `_system:bye` | tick | none | the peer left (`bye.rs`) |
//! | `_system:rejoin` | tick | none | handshake again on that connection (`rejoin.rs`) |
//! | `_system:draining` | request | none | stop picking the peer by filter, answer empty (`draining.rs`) |
//! | `_system:describe` | request | none | answer this node's description (`describe.rs`) |
//! | `_system:forward` | request | the user's payload, a `Forward` header in metadata | route it on, as a router (`forward.rs`) |
//!
//! `dispatch.rs` decodes each message once ([`System::of`]) and calls the message's
//! effect; a system event this version does not know is answered `NO_HANDLER` (a request)
//! or reported and dropped (a tick), so a newer peer's messages cost nothing here.
//! The parts it uses: the registry and events (through `Inner`), the handshake's decision
//! (`mesh/handshake.rs`, `node/join.rs`), the drain, the description and routing; nothing
//! here sends on its own but the answers it is given to make. Above `node/` in the order of
//! rooms (`tests/layers.rs`): each message's effect works on the whole node.

pub(crate) mod bye;
pub(crate) mod describe;
pub(crate) mod draining;
pub(crate) mod forward;
pub(crate) mod handshake;
pub(crate) mod heartbeat;
pub(crate) mod options;
pub(crate) mod rejoin;

/// How a system message travels: a request is answered, a tick is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Answered with a reply or an error reply.
    Request,
    /// Never answered.
    Tick,
}

/// A message of the protocol's own, by its event name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum System {
    /// A connection asks to join (`handshake.rs`).
    Handshake,
    /// A sign of life (`heartbeat.rs`).
    Heartbeat,
    /// The sender's options changed (`options.rs`).
    Options,
    /// The sender is leaving (`bye.rs`).
    Bye,
    /// The sender forgot us: handshake again (`rejoin.rs`).
    Rejoin,
    /// The sender is closing: stop picking it (`draining.rs`).
    Draining,
    /// Describe yourself (`describe.rs`).
    Describe,
    /// Route this on, as a router (`forward.rs`).
    Forward,
}

impl System {
    /// Every system message.
    pub(crate) const ALL: [System; 8] = [
        System::Handshake,
        System::Heartbeat,
        System::Options,
        System::Bye,
        System::Rejoin,
        System::Draining,
        System::Describe,
        System::Forward,
    ];

    /// The message an event name is, if this version knows it. A user's event (every
    /// request's) is told apart by its first bytes.
    pub(crate) fn of(event: &str) -> Option<System> {
        if !event.starts_with(protocol::SYSTEM_PREFIX) {
            return None;
        }
        System::ALL.into_iter().find(|m| m.event() == event)
    }

    /// The message's event name, as it travels.
    pub(crate) fn event(self) -> &'static str {
        match self {
            System::Handshake => handshake::EVENT,
            System::Heartbeat => heartbeat::EVENT,
            System::Options => options::EVENT,
            System::Bye => bye::EVENT,
            System::Rejoin => rejoin::EVENT,
            System::Draining => draining::EVENT,
            System::Describe => describe::EVENT,
            System::Forward => forward::EVENT,
        }
    }

    /// Whether it is sent as a request or a tick.
    pub(crate) fn kind(self) -> Kind {
        match self {
            System::Handshake | System::Draining | System::Describe | System::Forward => {
                Kind::Request
            }
            System::Heartbeat | System::Options | System::Bye | System::Rejoin => Kind::Tick,
        }
    }

    /// The message an arriving request is, if it is one of ours sent as a request: a
    /// tick's name sent as a request is not (it is answered `NO_HANDLER`, as an unknown
    /// one is).
    pub(crate) fn request(event: &str) -> Option<System> {
        System::of(event).filter(|m| m.kind() == Kind::Request)
    }

    /// The message an arriving tick is, if it is one of ours sent as a tick.
    pub(crate) fn tick(event: &str) -> Option<System> {
        System::of(event).filter(|m| m.kind() == Kind::Tick)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_message_decodes_from_its_own_name_and_nothing_else_does() {
        for message in System::ALL {
            assert_eq!(System::of(message.event()), Some(message), "{message:?}");
            assert!(message.event().starts_with(protocol::SYSTEM_PREFIX));
        }
        let names: std::collections::HashSet<_> = System::ALL.iter().map(|m| m.event()).collect();
        assert_eq!(names.len(), System::ALL.len());
        // A newer peer's message, a user's event, the prefix alone: none of ours.
        for other in [
            "_system:gossip",
            "heartbeat",
            "_system:",
            "",
            "_system:Heartbeat",
        ] {
            assert_eq!(System::of(other), None, "{other:?}");
        }
    }

    #[test]
    fn a_tick_sent_as_a_request_is_not_one_of_ours_and_the_reverse() {
        assert_eq!(System::request(bye::EVENT), None);
        assert_eq!(System::tick(bye::EVENT), Some(System::Bye));
        assert_eq!(System::tick(handshake::EVENT), None);
        assert_eq!(System::request(handshake::EVENT), Some(System::Handshake));
        let requests = System::ALL
            .iter()
            .filter(|m| m.kind() == Kind::Request)
            .count();
        assert_eq!(requests, 4);
    }
}
