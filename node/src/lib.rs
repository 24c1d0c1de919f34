//! placeholder: the node layer (being written).
mod error;
pub mod filter;
pub mod options;

pub use error::Error;
