//! A real name server on loopback for the discovery tests: hickory-server with one
//! in-memory zone whose records a test replaces while the mesh runs, on UDP and TCP (long
//! answers go over TCP) at the same port. And a "name server" that never answers.

#![allow(dead_code, unreachable_pub)]

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hickory_server::authority::{AuthorityObject, Catalog, ZoneType};
use hickory_server::proto::rr::rdata::{A, AAAA, SOA, SRV};
use hickory_server::proto::rr::{LowerName, Name, RData, Record, RecordSet, RecordType, RrKey};
use hickory_server::store::in_memory::InMemoryAuthority;
use hickory_server::ServerFuture;
use tokio::net::{TcpListener, UdpSocket};

/// The zone every test name is in.
pub const ZONE: &str = "mesh.test.";

/// A name server for [`ZONE`] on 127.0.0.1.
pub struct TestDns {
    pub address: SocketAddr,
    authority: Arc<InMemoryAuthority>,
    serial: AtomicU32,
    _server: ServerFuture<Catalog>,
}

impl TestDns {
    pub async fn start() -> TestDns {
        TestDns::start_zone(ZONE).await
    }

    /// A name server for the zone `origin` (a full name, e.g. `cluster.local.`).
    pub async fn start_zone(origin: &str) -> TestDns {
        let origin = Name::from_str(origin).unwrap();
        let authority = Arc::new(InMemoryAuthority::empty(
            origin.clone(),
            ZoneType::Primary,
            false,
        ));
        let soa = SOA::new(
            Name::from_str("ns.mesh.test.").unwrap(),
            Name::from_str("admin.mesh.test.").unwrap(),
            1,
            60,
            60,
            60,
            0,
        );
        assert!(
            authority
                .upsert(Record::from_rdata(origin.clone(), 60, RData::SOA(soa)), 1)
                .await
        );
        let mut catalog = Catalog::new();
        let object: Arc<dyn AuthorityObject> = authority.clone();
        catalog.upsert(LowerName::new(&origin), vec![object]);
        let mut server = ServerFuture::new(catalog);
        // UDP and TCP on one port (the resolver asks both at the same one).
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let port = udp.local_addr().unwrap().port();
            if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)).await {
                break (udp, tcp);
            }
        };
        let address = udp.local_addr().unwrap();
        server.register_socket(udp);
        server.register_listener(tcp, Duration::from_secs(5));
        TestDns {
            address,
            authority,
            serial: AtomicU32::new(2),
            _server: server,
        }
    }

    /// `label` in the zone, as a full name.
    pub fn name(label: &str) -> Name {
        Name::from_str(&format!("{label}.{ZONE}")).unwrap()
    }

    /// Replaces the A and AAAA records of `label` with `ips` (none: the name has no
    /// address records).
    pub async fn set(&self, label: &str, ips: &[IpAddr], ttl: u32) {
        self.set_name(&TestDns::name(label).to_string(), ips, ttl)
            .await;
    }

    /// [`set`](Self::set) for a full name in the zone (the zone's own name included).
    pub async fn set_name(&self, name: &str, ips: &[IpAddr], ttl: u32) {
        let full = if name.ends_with('.') {
            name.to_owned()
        } else {
            format!("{name}.")
        };
        let name = Name::from_str(&full).unwrap();
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        {
            let mut records = self.authority.records_mut().await;
            records.remove(&RrKey::new(LowerName::new(&name), RecordType::A));
            records.remove(&RrKey::new(LowerName::new(&name), RecordType::AAAA));
        }
        // Built whole and put in at once: the authority's `upsert` copies the set at each
        // record (10,000 records took 17 s that way).
        let mut v4 = RecordSet::new(name.clone(), RecordType::A, serial);
        let mut v6 = RecordSet::new(name.clone(), RecordType::AAAA, serial);
        for ip in ips {
            let (set, data) = match ip {
                IpAddr::V4(a) => (&mut v4, RData::A(A(*a))),
                IpAddr::V6(a) => (&mut v6, RData::AAAA(AAAA(*a))),
            };
            assert!(set.insert(Record::from_rdata(name.clone(), ttl, data), serial));
        }
        let mut records = self.authority.records_mut().await;
        for set in [v4, v6] {
            if !set.is_empty() {
                let key = RrKey::new(LowerName::new(&name), set.record_type());
                records.insert(key, Arc::new(set));
            }
        }
    }

    /// Replaces the SRV records `_zeronode._tcp.LABEL` with one per (target label, port).
    pub async fn set_srv(&self, label: &str, targets: &[(&str, u16)], ttl: u32) {
        let name = Name::from_str(&format!("_zeronode._tcp.{label}.{ZONE}")).unwrap();
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        self.authority
            .records_mut()
            .await
            .remove(&RrKey::new(LowerName::new(&name), RecordType::SRV));
        for (target, port) in targets {
            let srv = SRV::new(0, 0, *port, TestDns::name(target));
            let inserted = self
                .authority
                .upsert(
                    Record::from_rdata(name.clone(), ttl, RData::SRV(srv)),
                    serial,
                )
                .await;
            assert!(inserted);
        }
    }
}

/// A "name server" that reads every query and never answers (UDP and TCP at one port).
pub struct SilentDns {
    pub address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl SilentDns {
    pub async fn start() -> SilentDns {
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let port = udp.local_addr().unwrap().port();
            if let Ok(tcp) = TcpListener::bind(("127.0.0.1", port)).await {
                break (udp, tcp);
            }
        };
        let address = udp.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            let mut buf = vec![0u8; 4096];
            loop {
                tokio::select! {
                    _ = udp.recv_from(&mut buf) => {}
                    accepted = tcp.accept() => {
                        // Kept open, never read: a TCP query waits for nothing. At most a
                        // few: the test's resolver makes a handful.
                        if let Ok((stream, _)) = accepted {
                            if held.len() < 64 {
                                held.push(stream);
                            }
                        }
                    }
                }
            }
        });
        SilentDns { address, task }
    }
}

impl Drop for SilentDns {
    fn drop(&mut self) {
        self.task.abort();
    }
}
