//! `convlog._convlog`: the native part of the `convlog` Python package
//! (docs/python.md). The Python side (`python/convlog/`) re-exports these
//! classes and adds the asyncio twins and the exception classes.
//!
//! | file | what it holds |
//! |---|---|
//! | `store.rs` | `Store` (open, append, conversation reads) and `Conversation` |
//! | `read.rs` | `events()` and `tail()` iterators over the log |
//! | `convert.rs` | Python objects ⇄ the JSON form of events and entries |
//! | `api.rs` | resume helpers, `render`, `ingest`, `HistoryManager` |
//! | `verify.rs` | `verify`: the store's checks, sealed events, tamper evidence |
//! | `keys.rs` | key files: store key, tamper options, checkpoints, `keygen` |
//! | `control.rs` | `MessageControl` (contexts, validated adds, generation) |
//! | `errors.rs` | `convlog::Error` → the exceptions of `convlog/_errors.py` |

use pyo3::prelude::*;

mod api;
mod control;
mod convert;
mod errors;
mod keys;
mod read;
mod store;
mod verify;

#[pymodule]
fn _convlog(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<store::PyStore>()?;
    module.add_class::<store::Conversation>()?;
    module.add_class::<read::EventIter>()?;
    module.add_class::<read::Tail>()?;
    module.add_class::<api::PyHistoryManager>()?;
    module.add_class::<control::PyMessageControl>()?;
    module.add_function(wrap_pyfunction!(api::render, module)?)?;
    module.add_function(wrap_pyfunction!(api::ingest, module)?)?;
    module.add_function(wrap_pyfunction!(verify::verify, module)?)?;
    module.add_function(wrap_pyfunction!(keys::keygen, module)?)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The type aliases the stubs declare here are defined in Python
    // (`convlog/_types.py`); importable from this module as the stubs say.
    let types = module.py().import("convlog._types")?;
    for alias in [
        "Durability",
        "Entry",
        "Event",
        "Generator",
        "Pending",
        "Provider",
        "StrPath",
    ] {
        module.add(alias, types.getattr(alias)?)?;
    }
    Ok(())
}
