//! The tiers of memory, one module each. A tier owns its config section's validation
//! (`impl …Config { fn validate }`), the reads it adds to [`Memory::prepare`](crate::Memory::prepare)'s
//! rounds and the step it adds to [`Memory::commit`](crate::Memory::commit), as methods on
//! [`Memory`](crate::Memory) that return nothing to do when the tier is off. `lib.rs` calls
//! them in its two explicit rounds; a new tier is a module here, a config section, and a call
//! in the round that has what its reads need.

pub(crate) mod extraction;
pub(crate) mod facts;
pub(crate) mod knowledge;
pub(crate) mod recall;
pub(crate) mod summary;
pub(crate) mod window;
pub(crate) mod working;
