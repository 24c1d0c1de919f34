//! The nodes matching a filter across the mesh, and a stream from every one of them.
//!
//! [`Node::find`] lists the nodes a filter matches: the joined peers here, and the peers
//! of every router reachable from here (each router's description lists its peers with
//! their options; routers it lists are asked in turn). [`Call::stream_all`] opens one
//! stream to each match (here or through the routers, each with its own credit) and
//! merges them: items come as they arrive, tagged with their node; a source that fails
//! ends with its error, tagged the same way, and the others go on.
//!
//! Uses the calling side (`call.rs`, `stream.rs`), the peer registry and the description
//! (`describe.rs`, `introspect.rs`); nothing uses it but the public API.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use futures::stream::{self, BoxStream, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::calling::call::{Call, Typed};
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::mesh::link::Target;
use crate::mesh::peer::{NodeId, Scope};
use crate::node::Node;
use crate::options::Options;

/// The most routers one [`Node::find`] asks: a mesh with more is listed in part (the
/// routers nearest first), so that a find is bounded whatever the mesh says of itself.
pub const MAX_FOUND_ROUTERS: usize = 64;

/// A node a filter matched ([`Node::find`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Found {
    /// Its id.
    pub id: NodeId,
    /// Its options, as it advertised them in its handshake.
    pub options: Options,
    /// Whether it is a router.
    pub router: bool,
    /// The router it is joined to, for a node reached through routers; `None` for a peer
    /// joined here.
    pub via: Option<NodeId>,
}

impl Node {
    /// The nodes `filter` matches: the peers joined here (in the filter's direction, for
    /// [`Filter`]'s default: both), then those joined to the routers reachable from here
    /// (asked through their descriptions, [`Node::describe`]; at most
    /// [`MAX_FOUND_ROUTERS`] routers, nearest first), sorted by id, each once (a peer
    /// joined here is listed as such). This is what `zeronode ls` shows, for a program.
    ///
    /// A router that does not describe itself to this node (`DescribePolicy`) or does not
    /// answer within the node's request timeout is passed over: its peers are not listed.
    /// A predicate filter matches here only (it cannot be matched elsewhere either way).
    ///
    /// ```no_run
    /// # async fn f(node: node::Node) -> node::Result<()> {
    /// use node::Filter;
    /// for found in node.find(&Filter::new().eq("role", "indexer")).await? {
    ///     println!("{} {:?} via {:?}", found.id, found.options, found.via);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn find(&self, filter: &Filter) -> Result<Vec<Found>> {
        self.find_in(filter, Scope::Both).await
    }

    /// [`find`](Self::find) with the direction of a target's filter for the peers here.
    pub(crate) async fn find_in(&self, filter: &Filter, scope: Scope) -> Result<Vec<Found>> {
        if self.inner.life().is_closing() {
            return Err(Error::Closed);
        }
        let me = self.inner.id().clone();
        let mut found: BTreeMap<NodeId, Found> = BTreeMap::new();
        let mut routers: VecDeque<NodeId> = VecDeque::new();
        {
            let state = self.inner.state().lock();
            for entry in state.registry.matching(filter, scope) {
                let info = entry.info();
                found.entry(info.id.clone()).or_insert(Found {
                    id: info.id,
                    options: info.options,
                    router: info.router,
                    via: None,
                });
            }
            routers.extend(state.registry.routers().into_iter().map(|(id, _)| id));
        }
        let mut asked: BTreeSet<NodeId> = routers.iter().cloned().collect();
        asked.insert(me.clone());
        let remote = filter.to_spec().is_ok();
        let timeout = self.inner.config().request_timeout;
        let mut described = 0;
        while let Some(router) = routers.pop_front() {
            if !remote || described == MAX_FOUND_ROUTERS {
                break;
            }
            described += 1;
            let Ok(Ok(description)) =
                tokio::time::timeout(timeout, self.describe(router.clone())).await
            else {
                continue;
            };
            for peer in description.peers {
                if peer.router && asked.insert(peer.id.clone()) {
                    routers.push_back(peer.id.clone());
                }
                if peer.id == me || found.contains_key(&peer.id) {
                    continue;
                }
                if filter.matches(&peer.options) {
                    found.insert(
                        peer.id.clone(),
                        Found {
                            id: peer.id,
                            options: peer.options,
                            router: peer.router,
                            via: Some(router.clone()),
                        },
                    );
                }
            }
        }
        Ok(found.into_values().collect())
    }
}

impl<'a> Call<'a, Typed> {
    /// A stream from every node the target's filter matches ([`Target::all`] or
    /// [`Target::any`]; an id is [`Error::InvalidTarget`]), here and through routers: the
    /// matches are found first ([`Node::find`]), then one stream is opened to each with
    /// `data` (each with its own credit window, its own handler), and their items come
    /// merged as they arrive, each with the id of the node it came from. A source that fails
    /// (its handler's error, the node leaving, its deadline) yields its error as its last
    /// item, tagged with its id, and the others go on; the stream ends when every source
    /// ended. No match anywhere is [`Error::NoNodesMatchFilter`], before anything is sent.
    ///
    /// ```no_run
    /// # async fn f(node: node::Node) -> node::Result<()> {
    /// use futures::StreamExt;
    /// use node::{Filter, Target};
    ///
    /// let indexers = Target::all(Filter::new().eq("role", "indexer"));
    /// let mut hits = node.call(indexers, "search").stream_all::<String>(&"rust").await?;
    /// while let Some((from, hit)) = hits.next().await {
    ///     match hit {
    ///         Ok(hit) => println!("{from}: {hit}"),
    ///         Err(e) => eprintln!("{from} failed: {e}"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn stream_all<R>(
        self,
        data: &(impl Serialize + ?Sized),
    ) -> Result<BoxStream<'a, (NodeId, Result<R>)>>
    where
        R: DeserializeOwned + Send + 'a,
    {
        let (filter, scope) = match self.target() {
            Target::Any(filter, scope) | Target::All(filter, scope) => (filter.clone(), *scope),
            Target::Id(_) => {
                return Err(Error::InvalidTarget {
                    reason: "a stream from every match needs a filter, not an id",
                })
            }
        };
        let payload = protocol::encode_value(data)?;
        let found = self.node().find_in(&filter, scope).await?;
        if found.is_empty() {
            return Err(Error::NoNodesMatchFilter);
        }
        let sources: Vec<BoxStream<'a, (NodeId, Result<R>)>> = found
            .into_iter()
            .map(|found| {
                let id = found.id;
                let items = self
                    .to_one(Target::Id(id.clone()))
                    .raw()
                    .stream(payload.clone())
                    .map(|item| item.and_then(|bytes| Ok(protocol::decode_value::<R>(&bytes)?)));
                items.map(move |item| (id.clone(), item)).boxed()
            })
            .collect();
        Ok(stream::select_all(sources).boxed())
    }
}
