//! The crate's error type. The bindings map each variant onto one Python exception class.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A value is out of range or malformed (Python `ValueError`).
    Value(String),
    /// An argument has the wrong type or dtype (Python `TypeError`).
    Type(String),
    /// The request would not fit in memory (Python `MemoryError`), raised before allocating.
    Memory(String),
    /// An environment failure such as the OS entropy source (Python `RuntimeError`).
    Runtime(String),
    /// The computation was interrupted (`crate::interrupt`; Python `KeyboardInterrupt`).
    Interrupted,
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Value(m) | Error::Type(m) | Error::Memory(m) | Error::Runtime(m) => {
                f.write_str(m)
            }
            Error::Interrupted => f.write_str("interrupted"),
        }
    }
}

impl std::error::Error for Error {}
