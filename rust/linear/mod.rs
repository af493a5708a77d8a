//! Linear queries under local differential privacy (papers/linear-queries-ldp.txt; notes in
//! shared/notes/linear-queries.md): each user holds a value in [J] and the analyst wants
//! inner products `⟨q, p⟩` of queries with the distribution `p` of the values.
//!
//! [`adaptive`]: adaptive sample splitting (Algorithm 6, Theorem 5.2), pure ε-LDP with one
//! bit per user, for queries chosen one at a time from the answers so far.

pub mod adaptive;
