//! # ebb — the Ebbflow facade
//!
//! What an application depends on. It re-exports the object model, event loop, futures,
//! IOBufs and RCU from `ebb-core`, and picks the runtime the application runs on. Today that
//! is the hosted runtime (a Linux process, one pinned event loop per core); the native
//! runtime will slot in behind the same names.
//!
//! ```no_run
//! use ebb::net::{self, TcpConnection, TcpHandler, IOBuf, CloseReason};
//!
//! struct Echo;
//! impl TcpHandler for Echo {
//!     fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
//!         let _ = conn.send(data.into());
//!     }
//!     fn closed(&mut self, _reason: CloseReason) {}
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     ebb::run(ebb::Config::default(), || async {
//!         let listener = net::listen("127.0.0.1:7000".parse().unwrap(), |conn| conn.set_handler(Echo))?;
//!         println!("listening on {}", listener.local_addr());
//!         std::future::pending::<Result<(), net::TcpErrorKind>>().await
//!     })??;
//!     Ok(())
//! }
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use ebb_core::ebb::{EbbError, EbbId, MulticoreEbb, SharedEbb};
pub use ebb_core::event::{
    Elapsed, Handle, IdleId, IdleStatus, JoinHandle, SpawnError, add_idle_handler, at_core_exit,
    core_id, now, num_cores, remove_idle_handler, run_on, shutdown, sleep, sleep_until,
    spawn_local, spawn_local_on, spawn_on, timeout, yield_now,
};
pub use ebb_core::iobuf::{self, Cursor, IOBuf, IOBufChain};
pub use ebb_core::{CoreId, Ebb, EbbRef, Instant, future, rcu};
pub use ebb_hosted::{Config, ConfigError as RunError, run};

/// Networking: EbbRT's event-driven TCP interface.
pub mod net {
    pub use ebb_core::iobuf::{IOBuf, IOBufChain};
    pub use ebb_core::net::*;
    pub use ebb_hosted::tcp::{Listener, TcpConn, connect, listen};
}
