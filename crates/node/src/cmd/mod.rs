//! One module per command.

pub mod keygen;
pub mod skills;
pub mod validate;
