//! A sharded key-value service: three shards, a gateway in front of them, one client.
//!
//! - Each shard advertises `{role: shard, shard: N}` and keeps its part of the data, per
//!   tenant, in a map given to its handlers once (`with_state`).
//! - The gateway routes each key to one shard by a hash of the key, through a filter
//!   (`Target::any(Filter::new().eq("shard", N)).scope(Scope::Up)`); a count asks every shard at
//!   once and adds up the answers (scatter-gather, `gather`); `compact` sends a tick to every
//!   shard.
//! - Every node checks the `tenant` metadata in one `from_fn` middleware: a request without
//!   one is refused `UNAUTHENTICATED` before any handler runs; the tenant is handed to the
//!   handlers through the request's extensions, and the gateway passes it on to the shards.
//! - A scan is slow (a second per shard); the client gives it 500 ms. The gateway's calls to
//!   the shards inherit that deadline, so everybody gives up together: the client gets its
//!   timeout, and each shard stops its scan.
//! - Mid-run one shard closes: its keys are unavailable (a typed refusal, not a hang) and a
//!   count comes from the two shards left.
//!
//! Run it with `cargo run -p examples --bin kv`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use node::middleware::{from_fn, Next};
use node::options::options;
use node::{
    with_state, BoxError, Error, Filter, HandlerError, Node, NodeEvent, Request, Scope, Target,
    Value,
};
use serde::{Deserialize, Serialize};

type Result<T = (), E = BoxError> = std::result::Result<T, E>;

/// How many shards hold the data.
const SHARDS: usize = 3;

/// How long the program waits for something that should happen at once.
const PATIENCE: Duration = Duration::from_secs(10);

/// The tenant a request is for, as the middleware read it from the metadata.
#[derive(Clone, Debug)]
struct Tenant(String);

impl Tenant {
    /// The tenant the middleware put on `req`.
    fn of(req: &Request) -> std::result::Result<String, HandlerError> {
        req.extensions()
            .get::<Tenant>()
            .map(|t| t.0.clone())
            .ok_or_else(|| HandlerError::new("UNAUTHENTICATED", "no tenant"))
    }
}

/// Every node's middleware: no `tenant` metadata, no service (requests and ticks alike).
async fn tenant_required(mut req: Request, next: Next) -> Result<node::Response> {
    let Some(tenant) = req.meta().get_str("tenant").map(str::to_owned) else {
        let refusal =
            HandlerError::new("UNAUTHENTICATED", format!("{} needs a tenant", req.event()));
        return Err(refusal.into());
    };
    req.extensions_mut().insert(Tenant(tenant));
    next.run(req).await
}

/// The shard a key lives on. A sum of bytes keeps the example's output the same on every
/// run; a real service would use a proper hash (or a consistent-hash ring).
fn shard_of(key: &str) -> usize {
    key.bytes().map(usize::from).sum::<usize>() % SHARDS
}

/// One shard's data: (tenant, key) to value, and how many compactions it ran.
#[derive(Default)]
struct Store {
    data: Mutex<HashMap<(String, String), String>>,
    compactions: AtomicUsize,
}

/// A count over every shard the gateway could reach.
#[derive(Debug, Serialize, Deserialize)]
struct Count {
    total: usize,
    per_shard: BTreeMap<String, usize>,
}

/// Starts shard `n`: its options, its middleware, its handlers over its own store.
async fn shard(n: usize) -> Result<(Node, Arc<Store>)> {
    let node = Node::builder()
        .id(format!("shard-{n}"))
        .options(options([
            ("role", Value::from("shard")),
            ("shard", Value::from(n)),
        ]))
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    node.layer(from_fn(tenant_required));
    let store = Arc::new(Store::default());
    let id = node.id().to_string();
    node.on_request(
        "kv:put",
        with_state(
            Arc::clone(&store),
            move |store: Arc<Store>, req: Request| {
                let id = id.clone();
                async move {
                    let (key, value): (String, String) = req.decode()?;
                    let mut data = store.data.lock().unwrap_or_else(|e| e.into_inner());
                    data.insert((Tenant::of(&req)?, key), value);
                    Ok::<_, HandlerError>(id)
                }
            },
        ),
    );
    node.on_request(
        "kv:get",
        with_state(
            Arc::clone(&store),
            |store: Arc<Store>, req: Request| async move {
                let key: String = req.decode()?;
                let data = store.data.lock().unwrap_or_else(|e| e.into_inner());
                Ok::<_, HandlerError>(data.get(&(Tenant::of(&req)?, key)).cloned())
            },
        ),
    );
    node.on_request(
        "kv:count",
        with_state(
            Arc::clone(&store),
            |store: Arc<Store>, req: Request| async move {
                let tenant = Tenant::of(&req)?;
                let data = store.data.lock().unwrap_or_else(|e| e.into_inner());
                Ok::<_, HandlerError>(data.keys().filter(|(t, _)| *t == tenant).count())
            },
        ),
    );
    node.on_request("kv:scan", |_req: Request| async move {
        // A slow full scan: longer than the client will wait.
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok::<_, HandlerError>(Vec::<String>::new())
    });
    node.on_tick(
        "kv:compact",
        with_state(
            Arc::clone(&store),
            |store: Arc<Store>, _req: Request| async move {
                store.compactions.fetch_add(1, Ordering::SeqCst);
            },
        ),
    );
    Ok((node, store))
}

/// The gateway's handlers: each passes the request on to the shard(s) it concerns, with the
/// tenant, and answers with what they said.
fn serve_gateway(gateway: &Node) {
    let shards = || Target::all(Filter::new().eq("role", "shard")).scope(Scope::Up);
    let shard = |key: &str| Target::any(Filter::new().eq("shard", shard_of(key))).scope(Scope::Up);
    // A key whose shard is gone: say so, typed, rather than "no node matches".
    let unavailable = |key: &str, error: Error| match error {
        Error::NoNodesMatchFilter => {
            HandlerError::unavailable(format!("shard {} of {key:?} is down", shard_of(key)))
        }
        other => HandlerError::from(other),
    };

    gateway.layer(from_fn(tenant_required));
    gateway.on_request(
        "put",
        with_state(gateway.clone(), move |gw: Node, req: Request| async move {
            let (key, value): (String, String) = req.decode()?;
            let tenant = Tenant::of(&req)?;
            gw.call(shard(&key), "kv:put")
                .meta("tenant", &tenant)
                .send::<_, String>(&(&key, value))
                .await
                .map_err(|e| unavailable(&key, e))
        }),
    );
    gateway.on_request(
        "get",
        with_state(gateway.clone(), move |gw: Node, req: Request| async move {
            let key: String = req.decode()?;
            let tenant = Tenant::of(&req)?;
            gw.call(shard(&key), "kv:get")
                .meta("tenant", &tenant)
                .send::<_, Option<String>>(&key)
                .await
                .map_err(|e| unavailable(&key, e))
        }),
    );
    gateway.on_request(
        "count",
        with_state(gateway.clone(), move |gw: Node, req: Request| async move {
            let tenant = Tenant::of(&req)?;
            let answers = gw
                .call(shards(), "kv:count")
                .meta("tenant", &tenant)
                .gather::<_, usize>(&())
                .await?;
            let mut count = Count {
                total: 0,
                per_shard: BTreeMap::new(),
            };
            for (id, answer) in answers {
                let n = answer?;
                count.total += n;
                count.per_shard.insert(id.to_string(), n);
            }
            Ok::<_, HandlerError>(count)
        }),
    );
    gateway.on_request(
        "scan",
        with_state(gateway.clone(), move |gw: Node, req: Request| async move {
            let tenant = Tenant::of(&req)?;
            // No timeout of its own: it inherits what is left of the client's.
            let answers = gw
                .call(shards(), "kv:scan")
                .meta("tenant", &tenant)
                .gather::<_, Vec<String>>(&())
                .await?;
            let mut keys = Vec::new();
            for (_, answer) in answers {
                keys.extend(answer?);
            }
            Ok::<_, HandlerError>(keys)
        }),
    );
    gateway.on_request(
        "compact",
        with_state(gateway.clone(), move |gw: Node, req: Request| async move {
            let tenant = Tenant::of(&req)?;
            let sent = gw
                .call(shards(), "kv:compact")
                .meta("tenant", &tenant)
                .tick(&())
                .await?;
            Ok::<_, HandlerError>(sent.nodes)
        }),
    );
}

#[tokio::main]
async fn main() -> Result {
    let mut shards = Vec::new();
    for n in 0..SHARDS {
        shards.push(shard(n).await?);
    }
    let gateway = Node::builder()
        .id("gateway")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    serve_gateway(&gateway);
    for (shard, _) in &shards {
        let address = shard.address().ok_or("a shard is not bound")?;
        gateway.connect(&address).await?;
    }
    let client = Node::builder().id("client").build().await?;
    let address = gateway.address().ok_or("the gateway is not bound")?;
    client.connect(&address).await?;
    let acme = |event| client.call("gateway", event).meta("tenant", "acme");

    println!("-- put, routed by key to one shard");
    let people = [
        "ada", "grace", "alan", "edsger", "barbara", "donald", "ken", "dennis", "leslie",
        "niklaus", "tony", "john",
    ];
    let mut placed: BTreeMap<String, usize> = BTreeMap::new();
    for (i, name) in people.iter().enumerate() {
        let key = format!("user:{i}");
        let on: String = acme("put").send(&(&key, name)).await?;
        *placed.entry(on).or_default() += 1;
    }
    println!("stored {} keys: {placed:?}", people.len());

    println!("-- get, and tenants");
    let grace: Option<String> = acme("get").send("user:1").await?;
    println!(
        "get user:1 as acme   -> {}",
        grace.as_deref().unwrap_or("none")
    );
    let other: Option<String> = client
        .call("gateway", "get")
        .meta("tenant", "globex")
        .send("user:1")
        .await?;
    println!(
        "get user:1 as globex -> {}",
        other.as_deref().unwrap_or("none")
    );
    match client
        .request::<_, Option<String>>("gateway", "get", "user:1")
        .await
    {
        Err(Error::Handler { code, message }) => {
            println!("get user:1 without a tenant -> refused: {code}: {message}")
        }
        other => return Err(format!("unexpected: {other:?} without a tenant").into()),
    }

    println!("-- count, from every shard at once");
    let count: Count = acme("count").send(&()).await?;
    println!("count = {} {:?}", count.total, count.per_shard);

    println!("-- a deadline: the client gives a slow scan 500 ms");
    match acme("scan")
        .timeout(Duration::from_millis(500))
        .send::<_, Vec<String>>(&())
        .await
    {
        Err(Error::Timeout { timeout, .. }) => println!("scan -> timed out after {timeout:?}"),
        other => return Err(format!("unexpected: {other:?} for a slow scan").into()),
    }
    // The shards' scans inherited the deadline through the gateway: each one stops its scan
    // at it instead of running its full second for nobody.
    let stopped = || {
        shards
            .iter()
            .filter(|(shard, _)| shard.stats().handlers_expired > 0)
            .count()
    };
    tokio::time::timeout(PATIENCE, async {
        while stopped() < SHARDS {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .map_err(|_| format!("only {} shards stopped their scan", stopped()))?;
    println!("{} shards stopped their scan at the deadline", stopped());

    println!("-- a tick to every shard");
    let sent: usize = acme("compact").send(&()).await?;
    tokio::time::timeout(PATIENCE, async {
        while shards
            .iter()
            .any(|(_, store)| store.compactions.load(Ordering::SeqCst) == 0)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .map_err(|_| "a shard never compacted")?;
    println!("compact sent to {sent} shards; every shard compacted once");

    println!("-- shard-1 closes mid-run");
    let mut events = gateway.events();
    let (gone, _) = shards.remove(1);
    gone.close().await;
    let left = events
        .wait_for(
            |e| matches!(e, NodeEvent::PeerLeft { id, .. } if id.as_str() == "shard-1"),
            PATIENCE,
        )
        .await?;
    if let NodeEvent::PeerLeft { id, reason, .. } = left {
        println!("the gateway saw {id} leave ({})", reason.as_str());
    }
    let lost = (0..people.len())
        .map(|i| format!("user:{i}"))
        .find(|key| shard_of(key) == 1)
        .ok_or("no key on shard 1")?;
    match acme("get").send::<_, Option<String>>(&lost).await {
        Err(Error::Handler { code, message }) => {
            println!("get {lost} -> refused: {code}: {message}")
        }
        other => return Err(format!("unexpected: {other:?} for a key of a closed shard").into()),
    }
    let count: Count = acme("count").send(&()).await?;
    println!(
        "count = {} from {} shards {:?}",
        count.total,
        count.per_shard.len(),
        count.per_shard
    );

    client.close().await;
    gateway.close().await;
    for (shard, _) in shards {
        shard.close().await;
    }
    Ok(())
}
