//! Running a runtime on OS threads, one per core (hosted runtimes and tests).

use super::{Runtime, shutdown, spawn_local};
use crate::CoreId;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::future::Future;
use std::sync::Mutex;

/// Why [`run_on_threads`] did not return the main future's output.
#[derive(Debug)]
pub enum RunError {
    /// A core's thread panicked (the message, when it was a string).
    CorePanicked {
        /// The core that died.
        core: CoreId,
        /// Its panic message.
        message: String,
    },
    /// The runtime was shut down before the main future completed.
    ShutDownEarly,
    /// The OS would not start a thread for a core.
    ThreadSpawn(std::io::Error),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::CorePanicked { core, message } => write!(f, "{core} panicked: {message}"),
            RunError::ShutDownEarly => f.write_str("the runtime shut down before main returned"),
            RunError::ThreadSpawn(e) => write!(f, "cannot start a core thread: {e}"),
        }
    }
}

impl std::error::Error for RunError {}

/// Runs `runtime` with one OS thread per core and `main()` as the first task on core 0.
/// When that task completes, every core stops and its output is returned.
///
/// `init_core(core)` runs first on each core, inside its event loop context (pin the thread,
/// attach event sources, register [`at_core_exit`](super::at_core_exit) hooks).
pub fn run_on_threads<T, F>(
    runtime: Runtime,
    init_core: impl Fn(CoreId) + Send + Sync,
    main: impl FnOnce() -> F + Send,
) -> Result<T, RunError>
where
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let cores = runtime.handle().num_cores();
    let output: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
    let main = Mutex::new(Some(main));
    let (runtime, init_core, output_ref) = (&runtime, &init_core, &output);

    let main_ref = &main;
    let panics: Vec<(CoreId, String)> = std::thread::scope(|scope| {
        let mut threads = Vec::with_capacity(cores);
        for i in 0..cores {
            let core = CoreId(i as u32);
            let spawned = std::thread::Builder::new()
                .name(std::format!("ebb-core-{i}"))
                .spawn_scoped(scope, move || {
                    runtime.run_core(core, || {
                        init_core(core);
                        if core.index() != 0 {
                            return;
                        }
                        let main = main_ref.lock().ok().and_then(|mut m| m.take());
                        if let Some(main) = main {
                            let fut = main();
                            let output = output_ref.clone();
                            let _detached = spawn_local(async move {
                                let value = fut.await;
                                if let Ok(mut slot) = output.lock() {
                                    *slot = Some(value);
                                }
                                shutdown();
                            });
                        }
                    });
                });
            match spawned {
                Ok(t) => threads.push((core, t)),
                Err(e) => {
                    runtime.handle().shutdown();
                    return std::vec![(core, std::format!("thread spawn failed: {e}"))];
                }
            }
        }
        threads
            .into_iter()
            .filter_map(|(core, t)| t.join().err().map(|p| (core, panic_message(&*p))))
            .collect()
    });
    if let Some((core, message)) = panics.into_iter().next() {
        return Err(RunError::CorePanicked { core, message });
    }
    let value = output.lock().ok().and_then(|mut slot| slot.take());
    value.ok_or(RunError::ShutDownEarly)
}

fn panic_message(payload: &(dyn core::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        String::from(*s)
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        String::from("(non-string panic payload)")
    }
}
