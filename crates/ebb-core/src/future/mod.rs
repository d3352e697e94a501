//! Futures: Rust's `async`/`.await` is Ebbflow's continuation model (EbbRT's `Then`).
//!
//! What EbbRT's futures offered and `core` lacks is added here: a one-shot
//! [`Promise`]/[`PromiseFuture`] pair that crosses cores, and the usual combinators,
//! re-exported from `futures-util` rather than written again.

mod promise;

pub use futures_util::future::{Either, join, join_all, select, select_all, try_join_all};
pub use promise::{Canceled, Promise, PromiseFuture, promise};
