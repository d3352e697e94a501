//! (being written — temporary stand-in so the crate builds; replaced by the real module)
#![allow(missing_docs)]
use crate::CoreId;
use alloc::boxed::Box;
pub struct RcuDomain(usize);
impl RcuDomain {
    pub fn new(n: usize) -> Self { RcuDomain(n) }
    pub fn quiescent_state(&self, _c: CoreId) {}
    pub fn enter_idle(&self, _c: CoreId) {}
    pub fn exit_idle(&self, _c: CoreId) {}
    pub fn call_rcu(&self, _c: Option<CoreId>, _f: Box<dyn FnOnce() + Send>) {}
}
