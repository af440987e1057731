//! `rein-store`: implementations of `rein_core::Store`.
//!
//! Layout, one line a module:
//! - [`sqlite`]: the default backend, one SQLite file in WAL mode with
//!   `synchronous=FULL`, written by a single writer thread that commits
//!   batches; by table: `tasks`, `approvals` (and the ledger), `documents`
//!   (shared states, contracts, evidence), `journal` (and model usage).
//! - [`postgres`]: the store several nodes share, on a PostgreSQL server
//!   (`leases`, `metrics`, `schema`, `tls`, and `scratch`, the throwaway
//!   cluster of tests and benchmarks).
//! - [`schema`]: the SQLite schema and its migrations.
//! - `writer`: SQLite's one write connection and its group commit.
//! - `head`: the store's head recorded beside it, to find commits lost with a
//!   deleted write-ahead log.
//! - `query`: `SELECT`s with conditions, numbered for either backend.
//! - `rows`: what both backends write the same way (times, positions, cursors).
//! - `metrics`: the counters of spec §6, aggregated in SQL.
//! - `workspaces`: [`SavedWorkspaces`], task workspaces as they were at their
//!   step boundaries, content-addressed beside the store; `workspaces::walk`,
//!   one save's walk of a workspace on every core.

mod head;
mod metrics;
pub mod postgres;
mod query;
mod rows;
pub mod schema;
pub mod sqlite;
mod workspaces;
mod writer;

pub use postgres::PostgresStore;
pub use sqlite::{SqliteStore, StoreStats};
pub use workspaces::SavedWorkspaces;
pub use writer::WriterOptions;
