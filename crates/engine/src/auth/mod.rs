//! Who may do what: shared secrets ([`secret`]), daemon mode's ed25519 identities and known hosts
//! ([`keys`]), and the server's authorized keys with their per-key root, access and rate
//! ([`authorized`]).

pub mod authorized;
pub mod keys;
pub mod secret;
