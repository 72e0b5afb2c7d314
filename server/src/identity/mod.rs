//! Who is asking and what they may do: tokens and passwords, the `Authed`
//! extractor, console sessions, SSO and device-code login, project access
//! rules, rate limits, and the server's secret key.

pub mod access;
pub mod auth;
pub mod credentials;
pub mod device_login;
pub mod ratelimit;
pub mod secrets;
pub mod session_store;
pub mod sessions;
pub mod sso;
pub mod streams;
pub mod tokens;
pub mod users;
