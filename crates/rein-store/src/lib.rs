//! `rein-store`: implementations of `rein_core::Store`.
//!
//! - [`sqlite`]: the default backend, one SQLite file in WAL mode with
//!   `synchronous=FULL`, written by a single writer thread that commits batches.
//! - [`postgres`]: the store several nodes share, on a PostgreSQL server.
//! - [`schema`]: the schema and its migrations.
//! - `metrics`: the counters of spec §6, aggregated in SQL.

mod head;
mod metrics;
pub mod postgres;
mod query;
mod rows;
pub mod schema;
pub mod sqlite;
mod writer;

pub use postgres::PostgresStore;
pub use sqlite::{SqliteStore, StoreStats};
pub use writer::WriterOptions;
