//! The repository's own test kit, apart from the suite an adapter author adds
//! (`mnemix-conformance`): where a backend's test service comes from ([`services`]), a TCP proxy
//! that injects faults between a store and its server ([`faults`]), the killed-writer loop every
//! backend's kill test runs ([`kills`]) and the file tests of the SQLite family
//! ([`sqlite_family`]). Not published.

pub mod faults;
pub mod kills;
pub mod services;
pub mod sqlite_family;
