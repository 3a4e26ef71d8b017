//! Helpers shared by the core crate's behaviour tests.

pub mod mutate;
