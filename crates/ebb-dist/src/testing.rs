//! Test helpers: an in-process [`Caller`] that runs the destination's handler directly —
//! unit tests of routing, moving, merging and resolving use it; the Messenger's own tests
//! and the multi-node tests check the transport.

use crate::messenger::{CallError, LossReason};
use crate::node::NodeId;
use crate::remote::{CallFuture, Caller};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::rc::Rc;
use alloc::string::ToString;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::future::Future;
use core::pin::pin;
use core::task::{Context, Poll, Waker};
use ebb::{EbbId, IOBufChain};

pub type Handler = Rc<dyn Fn(&IOBufChain) -> Result<IOBufChain, alloc::string::String>>;

#[derive(Default)]
pub struct Nodes {
    pub handlers: RefCell<BTreeMap<(u32, u32, u16), Handler>>,
    pub down: RefCell<Vec<NodeId>>,
}

pub struct LocalCaller {
    pub me: NodeId,
    pub nodes: Rc<Nodes>,
}

impl Caller for LocalCaller {
    fn this_node(&self) -> NodeId {
        self.me
    }
    fn call(&self, node: NodeId, ebb: EbbId, kind: u16, request: IOBufChain) -> CallFuture {
        let result = if self.nodes.down.borrow().contains(&node) {
            Err(CallError::PeerLost {
                node,
                reason: LossReason::Disconnected,
            })
        } else {
            let handler = self
                .nodes
                .handlers
                .borrow()
                .get(&(node.0, ebb.as_u32(), kind))
                .cloned();
            match handler {
                Some(h) => h(&request).map_err(|reason| CallError::Failed { node, reason }),
                None => Err(CallError::Failed {
                    node,
                    reason: "no handler".to_string(),
                }),
            }
        };
        Box::pin(async move { result })
    }
}

/// Runs a future that never waits (every call above completes at once).
pub fn now<T>(f: impl Future<Output = T>) -> T {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("an in-process call waited"),
    }
}

pub fn gid(k: u32) -> EbbId {
    EbbId::from_u32(ebb::FIRST_GLOBAL_ID + k).unwrap()
}
