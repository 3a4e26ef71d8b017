//! Spindle as a server (DESIGN.md §11): the embedded node (file log, Disk Views, Memory and
//! Index Views, chunk store, truncation worker) and its HTTP/JSON and gRPC surfaces
//! (docs/api.md), plus the clients `spindle load`, `ride` and `status` use.
#![forbid(unsafe_code)]

pub mod catalog;
pub mod client;
pub mod config;
pub mod fanout;
pub mod grpc;
pub mod http;
pub mod http_conn;
pub mod http_input;
pub mod load;
pub mod node;
pub mod node_log;
pub mod openapi;
pub mod page;
pub mod proto;
pub mod redact;
pub mod remote;
pub mod serve;
pub mod shared_body;
pub mod source_seats;
pub mod status;

pub use config::ServerConfig;
pub use node::Node;
