//! Middleware written as an async function (`middleware::from_fn`) and shared state given to
//! handlers once (`with_state`), between two nodes on loopback: what a caller sees of a
//! refusal, that a refused tick runs nothing, and that every handler shares one state.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use node::middleware::{from_fn, from_fn_with_state, Next};
use node::{with_state, Error, HandlerError, Node, Request};
use support::{address, client, server, within};

/// The tenant a request is for, as the middleware found it in the metadata.
#[derive(Clone, Debug)]
struct Tenant(String);

/// A `from_fn` middleware that refuses what carries no `tenant` metadata and hands the
/// tenant on to the handler.
fn tenant_required(node: &Node) {
    node.layer(from_fn(|mut req: Request, next: Next| async move {
        let Some(tenant) = req.meta().get_str("tenant").map(str::to_owned) else {
            return Err(HandlerError::new(
                "UNAUTHENTICATED",
                format!("{} needs a tenant", req.event()),
            )
            .into());
        };
        req.extensions_mut().insert(Tenant(tenant));
        next.run(req).await
    }));
}

async fn joined_pair() -> (Node, Node) {
    let srv = server("srv").await;
    let cli = client("cli").await;
    within("connect", cli.connect(&address(&srv)))
        .await
        .unwrap();
    (srv, cli)
}

#[tokio::test]
async fn a_from_fn_refusal_reaches_the_caller_as_its_typed_error() {
    let (srv, cli) = joined_pair().await;
    tenant_required(&srv);
    srv.on_request("whoami", |req: Request| async move {
        let tenant = req.extensions().get::<Tenant>().cloned();
        Ok::<_, HandlerError>(tenant.map(|t| t.0))
    });

    let refused = within(
        "refused",
        cli.request::<_, Option<String>>("srv", "whoami", &()),
    )
    .await;
    match refused {
        Err(Error::Handler { code, message }) => {
            assert_eq!(code, "UNAUTHENTICATED");
            assert_eq!(message, "whoami needs a tenant");
        }
        other => panic!("expected the middleware's refusal, got {other:?}"),
    }
    let allowed: Option<String> = within(
        "allowed",
        cli.call("srv", "whoami").meta("tenant", "acme").send(&()),
    )
    .await
    .unwrap();
    assert_eq!(
        allowed.as_deref(),
        Some("acme"),
        "the handler sees what the middleware set"
    );
    cli.close().await;
    srv.close().await;
}

#[tokio::test]
async fn a_tick_refused_by_middleware_does_not_run_its_handler() {
    let (srv, cli) = joined_pair().await;
    let refused = Arc::new(AtomicUsize::new(0));
    srv.layer_for(
        "job",
        from_fn_with_state(
            Arc::clone(&refused),
            |refused: Arc<AtomicUsize>, req: Request, next: Next| async move {
                if req.meta().get_str("tenant").is_none() {
                    refused.fetch_add(1, Ordering::SeqCst);
                    return Err(HandlerError::new("UNAUTHENTICATED", "no tenant").into());
                }
                next.run(req).await
            },
        ),
    );
    let ran = Arc::new(Mutex::new(Vec::new()));
    srv.on_tick(
        "job",
        with_state(
            Arc::clone(&ran),
            |ran: Arc<Mutex<Vec<Option<String>>>>, req: Request| async move {
                let tenant = req.meta().get_str("tenant").map(str::to_owned);
                ran.lock().unwrap().push(tenant);
            },
        ),
    );

    for _ in 0..3 {
        cli.tick("srv", "job", &()).await.unwrap();
    }
    cli.call("srv", "job")
        .meta("tenant", "acme")
        .tick(&())
        .await
        .unwrap();
    // Both kinds have arrived once three were refused and one ran.
    within("four ticks seen", async {
        while refused.load(Ordering::SeqCst) < 3 || ran.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(
        *ran.lock().unwrap(),
        [Some("acme".to_owned())],
        "only the allowed tick ran"
    );
    assert_eq!(refused.load(Ordering::SeqCst), 3);
    cli.close().await;
    srv.close().await;
}

#[tokio::test]
async fn state_is_the_same_instance_in_every_handler_and_middleware() {
    /// The shared state: where each user of it records the address it saw.
    #[derive(Default)]
    struct Shared {
        seen: Mutex<Vec<(&'static str, usize)>>,
    }
    impl Shared {
        fn saw(self: &Arc<Self>, by: &'static str) {
            self.seen
                .lock()
                .unwrap()
                .push((by, Arc::as_ptr(self) as usize));
        }
    }

    let (srv, cli) = joined_pair().await;
    let shared = Arc::new(Shared::default());
    srv.layer(from_fn_with_state(
        Arc::clone(&shared),
        |shared: Arc<Shared>, req: Request, next: Next| async move {
            shared.saw("middleware");
            next.run(req).await
        },
    ));
    srv.on_request(
        "get",
        with_state(
            Arc::clone(&shared),
            |shared: Arc<Shared>, _req: Request| async move {
                shared.saw("get");
                Ok::<_, HandlerError>(())
            },
        ),
    );
    srv.on_request(
        "put",
        with_state(
            Arc::clone(&shared),
            |shared: Arc<Shared>, _req: Request| async move {
                shared.saw("put");
                Ok::<_, HandlerError>(())
            },
        ),
    );
    srv.on_tick(
        "bump",
        with_state(
            Arc::clone(&shared),
            |shared: Arc<Shared>, _req: Request| async move {
                shared.saw("bump");
            },
        ),
    );

    within("get", cli.request::<_, ()>("srv", "get", &()))
        .await
        .unwrap();
    within("put", cli.request::<_, ()>("srv", "put", &()))
        .await
        .unwrap();
    cli.tick("srv", "bump", &()).await.unwrap();
    within("the tick ran", async {
        while !shared
            .seen
            .lock()
            .unwrap()
            .iter()
            .any(|(by, _)| *by == "bump")
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    let seen = shared.seen.lock().unwrap().clone();
    let mut users: Vec<&str> = seen.iter().map(|(by, _)| *by).collect();
    users.sort_unstable();
    assert_eq!(
        users,
        [
            "bump",
            "get",
            "middleware",
            "middleware",
            "middleware",
            "put"
        ]
    );
    let original = Arc::as_ptr(&shared) as usize;
    assert!(
        seen.iter().all(|(_, at)| *at == original),
        "one instance: {seen:?}"
    );
    cli.close().await;
    srv.close().await;
}
