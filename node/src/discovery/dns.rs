//! The DNS source: the A and AAAA records of `NAME:PORT`, or the SRV records
//! `_zeronode._tcp.NAME`, asked again at the answer's TTL, after a failure and when the
//! node asks (see [`Discover`]).

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfigGroup, ResolverConfig};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::{ResolveError, TokioResolver};
use std::future::Future;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};

use super::discover::{Discover, DiscoveryError};

/// The prefix of the SRV names a DNS source asks for a name without a port.
pub const SRV_PREFIX: &str = "_zeronode._tcp.";

/// One answer of a lookup: the addresses, and how long they hold.
type Answer = (Result<Vec<String>, DiscoveryError>, Duration);

/// A DNS name followed by its TTL: `NAME:PORT` resolves the A and AAAA records of NAME
/// (each address with PORT); `NAME` alone resolves the SRV records `_zeronode._tcp.NAME`
/// (each target's addresses with the record's port). The resolver is `hickory-resolver`
/// with the system's configuration (`/etc/resolv.conf`), or the name server given.
///
/// Resolved again when the shortest TTL of the answer runs out, clamped to
/// [`ttl_bounds`](Self::ttl_bounds) (default 1 s to 60 s: a TTL of 0 does not make a
/// busy loop, a TTL of a year does not freeze the set); after a failure, after the
/// minimum, doubling up to the maximum; on [`refresh`](Discover::refresh), at once but
/// never sooner than the minimum after the last resolution.
///
/// ```no_run
/// # async fn demo(node: node::Node) {
/// use node::discover::Dns;
///
/// let workers = node.discover(Dns::new("workers.default.svc.cluster.local:5555"));
/// # let _ = workers; }
/// ```
pub struct Dns {
    name: String,
    port: Option<u16>,
    name_server: Option<SocketAddr>,
    min_ttl: Duration,
    max_ttl: Duration,
    timeout: Duration,
    /// At most this many addresses of one answer are kept (the rest are dropped, so a
    /// name with a million records costs a bounded set).
    max_addresses: usize,
    running: Running,
}

/// The state of a running DNS source (not cloned).
#[derive(Default)]
struct Running {
    resolver: Option<TokioResolver>,
    /// When to resolve next; `None` before the first (at once).
    wake: Option<Pin<Box<Sleep>>>,
    /// The lookup under way, in a task of its own (so this source stays `Sync`).
    lookup: Option<JoinHandle<Answer>>,
    /// When the last lookup started (a refresh waits the minimum after it).
    last: Option<Instant>,
    /// Failed lookups in a row (the wait doubles).
    failures: u32,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(lookup) = self.lookup.take() {
            lookup.abort();
        }
    }
}

impl Clone for Dns {
    /// The same name and settings, not yet running.
    fn clone(&self) -> Dns {
        Dns {
            name: self.name.clone(),
            port: self.port,
            name_server: self.name_server,
            min_ttl: self.min_ttl,
            max_ttl: self.max_ttl,
            timeout: self.timeout,
            max_addresses: self.max_addresses,
            running: Running::default(),
        }
    }
}

impl std::fmt::Debug for Dns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns")
            .field("name", &self.name)
            .field("port", &self.port)
            .field("name_server", &self.name_server)
            .field("ttl_bounds", &(self.min_ttl, self.max_ttl))
            .finish_non_exhaustive()
    }
}

impl Dns {
    /// Follows `NAME:PORT` (A and AAAA records) or `NAME` (SRV records
    /// `_zeronode._tcp.NAME`). An invalid name is reported by the first answer, as
    /// [`DiscoveryError::InvalidName`].
    pub fn new(name: impl Into<String>) -> Dns {
        let given: String = name.into();
        let (name, port) = match given.rsplit_once(':') {
            Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => {
                // A port that does not parse (too large) leaves the colon in the name,
                // which the resolver refuses: an `InvalidName` at the first answer.
                match port.parse::<u16>() {
                    Ok(port) => (host.to_owned(), Some(port)),
                    Err(_) => (given.clone(), None),
                }
            }
            _ => (given, None),
        };
        Dns {
            name,
            port,
            name_server: None,
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(60),
            timeout: Duration::from_secs(5),
            max_addresses: 4096,
            running: Running::default(),
        }
    }

    /// Asks this name server (UDP, and TCP for long answers) instead of the system's.
    pub fn name_server(mut self, address: SocketAddr) -> Dns {
        self.name_server = Some(address);
        self
    }

    /// The TTL of an answer is clamped to `min..=max` (default 1 s to 60 s); `min` is
    /// also the shortest time between two resolutions.
    pub fn ttl_bounds(mut self, min: Duration, max: Duration) -> Dns {
        self.min_ttl = min;
        self.max_ttl = max.max(min);
        self
    }

    /// How long one query waits for the name server (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Dns {
        self.timeout = timeout;
        self
    }

    /// Keeps at most this many addresses of one answer (default 4,096).
    pub fn max_addresses(mut self, max: usize) -> Dns {
        self.max_addresses = max;
        self
    }

    /// The resolver, made at the first lookup.
    fn resolver(&mut self) -> Result<TokioResolver, DiscoveryError> {
        if let Some(resolver) = &self.running.resolver {
            return Ok(resolver.clone());
        }
        let mut builder = match self.name_server {
            Some(server) => {
                let servers =
                    NameServerConfigGroup::from_ips_clear(&[server.ip()], server.port(), true);
                TokioResolver::builder_with_config(
                    ResolverConfig::from_parts(None, vec![], servers),
                    TokioConnectionProvider::default(),
                )
            }
            None => {
                TokioResolver::builder_tokio().map_err(|e| DiscoveryError::Config(e.to_string()))?
            }
        };
        let options = builder.options_mut();
        options.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        // Answers of a few hundred records fit one UDP message with EDNS(0).
        options.edns0 = true;
        options.timeout = self.timeout;
        options.attempts = 1;
        // Our own timing decides when to ask again; a cache would only hide changes.
        options.cache_size = 0;
        let resolver = builder.build();
        self.running.resolver = Some(resolver.clone());
        Ok(resolver)
    }

    /// Starts a lookup in a task of its own.
    fn start(&mut self) {
        self.running.last = Some(Instant::now());
        let resolver = match self.resolver() {
            Ok(resolver) => resolver,
            Err(e) => {
                let min = self.min_ttl;
                self.running.lookup = Some(tokio::spawn(async move { (Err(e), min) }));
                return;
            }
        };
        let (name, port, max) = (self.name.clone(), self.port, self.max_addresses);
        let bounds = (self.min_ttl, self.max_ttl);
        self.running.lookup = Some(tokio::spawn(async move {
            let looked = match port {
                Some(port) => lookup_ip(&resolver, &name, port, max).await,
                None => lookup_srv(&resolver, &name, max).await,
            };
            match looked {
                Ok((addresses, ttl)) => (Ok(addresses), ttl.clamp(bounds.0, bounds.1)),
                Err(e) => (Err(e), bounds.0),
            }
        }));
    }
}

/// A resolver error as ours; "no such name" and "no records of this type" are an empty
/// answer (`None`). A server failure (SERVFAIL, REFUSED) is a failure, not an empty
/// answer: only a name server that says so empties the set.
fn resolve_error(name: &str, e: &ResolveError) -> Option<DiscoveryError> {
    use hickory_resolver::proto::op::ResponseCode;
    use hickory_resolver::proto::ProtoErrorKind;
    if let Some(proto) = e.proto() {
        match proto.kind() {
            ProtoErrorKind::NoRecordsFound { response_code, .. }
                if matches!(
                    *response_code,
                    ResponseCode::NoError | ResponseCode::NXDomain
                ) =>
            {
                return None;
            }
            ProtoErrorKind::Timeout => {
                return Some(DiscoveryError::Timeout {
                    name: name.to_owned(),
                })
            }
            _ => {}
        }
    }
    Some(DiscoveryError::Resolve {
        name: name.to_owned(),
        reason: e.to_string(),
    })
}

/// `tcp://IP:PORT`, with brackets for IPv6.
fn endpoint(ip: IpAddr, port: u16) -> String {
    format!("tcp://{}", SocketAddr::new(ip, port))
}

/// The A and AAAA records of `name`, each with `port`; the shortest TTL. Asked apart,
/// so that a failure of one is a failure (not hidden behind the other's "no records").
async fn lookup_ip(
    resolver: &TokioResolver,
    name: &str,
    port: u16,
    max: usize,
) -> Result<(Vec<String>, Duration), DiscoveryError> {
    let (v4, v6) = tokio::join!(resolver.ipv4_lookup(name), resolver.ipv6_lookup(name));
    let mut set = BTreeSet::new();
    let mut ttl = u32::MAX;
    let mut take = |lookup: &hickory_resolver::lookup::Lookup| {
        for record in lookup.records() {
            ttl = ttl.min(record.ttl());
            let ip = match record.data() {
                hickory_resolver::proto::rr::RData::A(a) => IpAddr::V4(a.0),
                hickory_resolver::proto::rr::RData::AAAA(a) => IpAddr::V6(a.0),
                _ => continue,
            };
            if set.len() < max {
                set.insert(endpoint(ip, port));
            }
        }
    };
    for outcome in [
        v4.map(|l| l.as_lookup().clone()),
        v6.map(|l| l.as_lookup().clone()),
    ] {
        match outcome {
            Ok(lookup) => take(&lookup),
            Err(e) => {
                if let Some(e) = resolve_error(name, &e) {
                    return Err(e);
                }
            }
        }
    }
    let ttl = if ttl == u32::MAX { 0 } else { ttl };
    Ok((
        set.into_iter().collect(),
        Duration::from_secs(u64::from(ttl)),
    ))
}

/// The SRV records `_zeronode._tcp.NAME`, each target resolved; the shortest TTL.
async fn lookup_srv(
    resolver: &TokioResolver,
    name: &str,
    max: usize,
) -> Result<(Vec<String>, Duration), DiscoveryError> {
    let srv_name = format!("{SRV_PREFIX}{name}");
    let lookup = match resolver.srv_lookup(srv_name.as_str()).await {
        Ok(lookup) => lookup,
        Err(e) => {
            return match resolve_error(&srv_name, &e) {
                None => Ok((Vec::new(), Duration::ZERO)),
                Some(e) => Err(e),
            }
        }
    };
    let mut ttl = lookup
        .as_lookup()
        .records()
        .iter()
        .map(|r| r.ttl())
        .min()
        .unwrap_or(0);
    let targets: BTreeSet<(String, u16)> = lookup
        .iter()
        .map(|srv| (srv.target().to_ascii(), srv.port()))
        .take(max)
        .collect();
    let mut set = BTreeSet::new();
    for (target, port) in targets {
        if set.len() >= max {
            break;
        }
        match resolver.lookup_ip(target.as_str()).await {
            Ok(ips) => {
                for record in ips.as_lookup().records() {
                    ttl = ttl.min(record.ttl());
                }
                set.extend(ips.iter().map(|ip| endpoint(ip, port)));
            }
            // One target that does not resolve leaves the others.
            Err(e) => {
                if let Some(e) = resolve_error(&target, &e) {
                    tracing::debug!(%target, error = %e, "an SRV target did not resolve");
                }
            }
        }
    }
    Ok((
        set.into_iter().take(max).collect(),
        Duration::from_secs(u64::from(ttl)),
    ))
}

impl Stream for Dns {
    type Item = Result<Vec<String>, DiscoveryError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(lookup) = this.running.lookup.as_mut() {
                let answered = match Pin::new(lookup).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(answered) => answered,
                };
                this.running.lookup = None;
                let (result, mut wait) = answered.unwrap_or_else(|e| {
                    (
                        Err(DiscoveryError::Resolve {
                            name: this.name.clone(),
                            reason: format!("the lookup task failed: {e}"),
                        }),
                        this.min_ttl,
                    )
                });
                if result.is_err() {
                    // min, 2 min, 4 min, ... up to the maximum.
                    let factor = 1u32 << this.running.failures.min(16);
                    wait = this.min_ttl.saturating_mul(factor).min(this.max_ttl);
                    this.running.failures = this.running.failures.saturating_add(1);
                } else {
                    this.running.failures = 0;
                }
                let at = Instant::now() + wait;
                match this.running.wake.as_mut() {
                    Some(sleep) => sleep.as_mut().reset(at),
                    None => this.running.wake = Some(Box::pin(tokio::time::sleep_until(at))),
                }
                return Poll::Ready(Some(result));
            }
            if let Some(sleep) = this.running.wake.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            this.start();
        }
    }
}

impl Discover for Dns {
    fn refresh(&mut self) {
        if self.running.lookup.is_some() {
            return;
        }
        let soonest = match self.running.last {
            Some(last) => (last + self.min_ttl).max(Instant::now()),
            None => Instant::now(),
        };
        if let Some(sleep) = self.running.wake.as_mut() {
            if sleep.deadline() > soonest {
                sleep.as_mut().reset(soonest);
            }
        }
    }

    fn describe(&self) -> String {
        match self.port {
            Some(port) => format!("{}:{port}", self.name),
            None => format!("{SRV_PREFIX}{}", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_a_port_asks_for_addresses_and_one_without_for_srv() {
        let dns = Dns::new("workers.svc:5555");
        assert_eq!(dns.describe(), "workers.svc:5555");
        let dns = Dns::new("workers.svc");
        assert_eq!(dns.describe(), "_zeronode._tcp.workers.svc");
        // A port past u16 stays in the name (refused at the first answer).
        let dns = Dns::new("workers.svc:99999");
        assert_eq!(dns.port, None);
    }

    #[test]
    fn addresses_are_written_as_endpoints() {
        assert_eq!(
            endpoint("10.0.0.7".parse().unwrap(), 5555),
            "tcp://10.0.0.7:5555"
        );
        assert_eq!(endpoint("::1".parse().unwrap(), 5555), "tcp://[::1]:5555");
    }
}
